#!/usr/bin/env python3
"""
PyTorch reference for the C transformer (include/libra/tfm.h) and its optimizer
(include/libra/adamw.h): writes the golden files that tests/test_golden.c checks.

    /usr/bin/python3 tools/torch-reference.py              # writes tests/golden/*.h5
    /usr/bin/python3 tools/torch-reference.py --validate   # the same, plus self-checks
    /usr/bin/python3 tools/torch-reference.py --out DIR --case qwen3-gqa-tied

Needs python3-torch, python3-h5py and python3-numpy (Debian: apt-get install -y
python3-torch python3-h5py python3-numpy; written against torch 1.13). It does NOT use
the transformers package: the architecture below is written from the contract in
tfm.h (Llama / Qwen2 / Qwen3, Hugging Face conventions). CI does not run this script;
the files it wrote are committed under tests/golden/.

For each case it builds a tiny random model (numpy PCG64 seeded per case; matrices and
embeddings normal(0, 0.02), norm weights 1 + normal(0, 0.1), biases normal(0, 0.05) so
that norms and biases matter), rounds it to float32 and writes it in our model-file
format (include/libra/tfm_io.h): <case>.model.h5. Then, with every computation in
FLOAT64 starting from those float32 weights (hyper-parameters that the C code holds as
float -- eps, rope_theta, temperature, AdamW settings -- are also rounded to float32
first), it writes <case>.golden.h5:

  /seq_len int32 (S), /tokens int32 (T), /targets int32 (T, -1 = no target),
  /weights float32 (T), attribute temperature (float32)
  /logits float32 (T, V)   raw logits (temperature 1)
  /logprob float32 (T)     log softmax(logits / temperature)[target], 0 where no target
  /entropy float32 (T)     entropy of softmax(logits / temperature), at every token
  attribute loss (float64) J = -sum_t w_t logprob_t
  /grads/<HF tensor name>  float32, HF shape: dJ/dparam (tied: no lm_head.weight; the
                           embedding gradient includes the head's part)
  AdamW attributes lr, beta1, beta2, eps, weight_decay, clip_norm, min_lr_ratio
  (float32), schedule (int: 0 constant, 1 cosine), schedule_name (string),
  warmup_steps, total_steps (int64);
  /adamw_losses float64 (6)      J before each of 5 steps on the same batch and after
                                 the last
  /adamw_grad_norms float64 (5)  global gradient norm before clipping, per step
  /adamw_lrs float64 (5)         learning rate the schedule gave each step (1-based)

The optimizer is torch.optim.AdamW itself (weight decay on every parameter) with
torch.nn.utils.clip_grad_norm_ and the schedule of adamw.h: 1-based step s,
  constant: lr
  cosine:   s <= warmup: lr * s / warmup;  else p = min(1, (s - warmup) /
            max(1, total - warmup)), lr * (r + (1 - r) * (1 + cos(pi p)) / 2), r = min_lr_ratio

--validate checks the reference itself: autograd gradients against central finite
differences in float64 (per tensor, random direction), the vectorised forward against
an independent loop-by-loop numpy implementation of tfm.h's formulas, the packed batch
against each sequence run alone, torch's AdamW against the textbook update, a float32
run of the same code against the float64 golden values under the C test's tolerances
(what a correct float32 implementation achieves), and "mutants" (classic bugs: wrong
rotary pairing, no sequence boundaries, positions not restarting, GQA head mapping,
1/sqrt(C/H) scale, temperature ignored, qk-norm after rotary, ...) that the C test's
tolerances must reject.
"""
import argparse
import math
import os
import sys

import h5py
import numpy as np
import torch

torch.set_default_dtype(torch.float64)

F32 = lambda x: float(np.float32(x))  # a value as the C code (float) holds it

# Tolerances of tests/test_golden.c (see tests/golden/README).
TOL_TENSOR = 1e-4   # |a - b| <= TOL * max|b| over the tensor
TOL_LOSS = 1e-5     # |a - b| <= TOL * |b|

CASES = {
    # Qwen2: q/k/v biases, GQA 4 query heads on 2 kv heads, untied head, warm-up +
    # cosine, clip_norm between the norms: the first steps are clipped, the last not.
    "qwen2-gqa-untied": dict(
        model_type="qwen2", V=300, C=32, L=2, H=4, K=2, D=8, F=48, tie=0, bias=1, qk_norm=0,
        rope_theta=1e6, eps=1e-6, seed=1002, seq_len=[7, 5, 9], temperature=0.8,
        adamw=dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, clip_norm=2.5,
                   schedule="cosine", warmup_steps=2, total_steps=6, min_lr_ratio=0.1)),
    # Qwen3: per-head q/k RMSNorm, H*D = 48 != C = 32 (head_dim is its own parameter),
    # all 4 heads share 1 kv head, tied head, constant lr, clip_norm small enough that
    # every step is clipped.
    "qwen3-gqa-tied": dict(
        model_type="qwen3", V=300, C=32, L=2, H=4, K=1, D=12, F=48, tie=1, bias=0, qk_norm=1,
        rope_theta=100.0, eps=1e-6, seed=1003, seq_len=[7, 5, 9], temperature=0.8,
        adamw=dict(lr=2e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                   clip_norm=0.05, schedule="constant", warmup_steps=0, total_steps=0,
                   min_lr_ratio=0.0)),
    # Llama: plain multi-head (K = H), no biases, untied, warm-up + cosine that reaches
    # its floor inside the 5 steps, no clipping (clip_norm 0).
    "llama-mha-untied": dict(
        model_type="llama", V=300, C=32, L=2, H=4, K=4, D=8, F=48, tie=0, bias=0, qk_norm=0,
        rope_theta=10000.0, eps=1e-5, seed=1001, seq_len=[9, 5, 7], temperature=0.8,
        adamw=dict(lr=5e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.05, clip_norm=0.0,
                   schedule="cosine", warmup_steps=1, total_steps=4, min_lr_ratio=0.2)),
}


# ---- parameters -------------------------------------------------------------------

def tensor_specs(cf):
    """(HF name, shape, kind) in Hugging Face order; kind: matrix | norm | bias."""
    C, H, K, D, F, V = cf["C"], cf["H"], cf["K"], cf["D"], cf["F"], cf["V"]
    out = [("model.embed_tokens.weight", (V, C), "matrix")]
    for i in range(cf["L"]):
        p = "model.layers.%d." % i
        out.append((p + "self_attn.q_proj.weight", (H * D, C), "matrix"))
        if cf["bias"]:
            out.append((p + "self_attn.q_proj.bias", (H * D,), "bias"))
        out.append((p + "self_attn.k_proj.weight", (K * D, C), "matrix"))
        if cf["bias"]:
            out.append((p + "self_attn.k_proj.bias", (K * D,), "bias"))
        out.append((p + "self_attn.v_proj.weight", (K * D, C), "matrix"))
        if cf["bias"]:
            out.append((p + "self_attn.v_proj.bias", (K * D,), "bias"))
        out.append((p + "self_attn.o_proj.weight", (C, H * D), "matrix"))
        if cf["qk_norm"]:
            out.append((p + "self_attn.q_norm.weight", (D,), "norm"))
            out.append((p + "self_attn.k_norm.weight", (D,), "norm"))
        out.append((p + "mlp.gate_proj.weight", (F, C), "matrix"))
        out.append((p + "mlp.up_proj.weight", (F, C), "matrix"))
        out.append((p + "mlp.down_proj.weight", (C, F), "matrix"))
        out.append((p + "input_layernorm.weight", (C,), "norm"))
        out.append((p + "post_attention_layernorm.weight", (C,), "norm"))
    out.append(("model.norm.weight", (C,), "norm"))
    if not cf["tie"]:
        out.append(("lm_head.weight", (V, C), "matrix"))
    return out


def random_params(cf):
    """name -> float32 numpy array."""
    rng = np.random.default_rng(cf["seed"])
    P = {}
    for name, shape, kind in tensor_specs(cf):
        if kind == "matrix":
            a = rng.normal(0.0, 0.02, size=shape)
        elif kind == "norm":
            a = 1.0 + rng.normal(0.0, 0.1, size=shape)
        else:
            a = rng.normal(0.0, 0.05, size=shape)
        P[name] = a.astype(np.float32)
    return P


def random_batch(cf):
    rng = np.random.default_rng(cf["seed"] + 500)
    V, lens = cf["V"], cf["seq_len"]
    T = sum(lens)
    tokens = rng.integers(0, V, size=T).astype(np.int32)
    tokens[0] = V - 1  # the top id is used (catches off-by-one vocab bounds)
    targets = np.full(T, -1, dtype=np.int32)
    start = 0
    for si, n in enumerate(lens):
        for j in range(n - 1):  # next token in the same sequence
            targets[start + j] = tokens[start + j + 1]
        # the last token of a sequence scores a token outside the batch
        targets[start + n - 1] = rng.integers(0, V) if si == 1 else -1
        start += n
    targets[1] = -1                # a prompt position inside a sequence
    targets[lens[0] + 2] = -1      # and one in the second sequence
    valid = targets >= 0
    weights = np.where(valid, (0.5 + rng.random(T)) / valid.sum(), 0.0).astype(np.float32)
    weights[1] = 0.75  # a weight where there is no target: must have no effect
    return dict(seq_len=np.array(lens, dtype=np.int32), tokens=tokens, targets=targets,
                weights=weights, temperature=np.float32(cf["temperature"]))


# ---- the model (vectorised torch) ---------------------------------------------------

def rmsnorm(x, w, eps, bug=None):
    if bug == "rms_eps_outside":
        return x / (torch.sqrt((x * x).mean(-1, keepdim=True)) + eps) * w
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, pos, D, theta, bug=None):
    """x (T, n, D); HF rotate-half: pairs (i, i + D/2), angle pos * theta^(-2i/D)."""
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = pos.to(x.dtype)[:, None] * inv.to(x.dtype)[None, :]       # (T, D/2)
    if bug == "rope_interleaved":  # GPT-J / Meta pairing (2i, 2i+1): the classic mix-up
        c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y0, y1 = x0 * c - x1 * s, x1 * c + x0 * s
        return torch.stack((y0, y1), dim=-1).reshape(x.shape)
    cos = torch.cat((torch.cos(ang), torch.cos(ang)), -1)[:, None, :]
    sin = torch.cat((torch.sin(ang), torch.sin(ang)), -1)[:, None, :]
    if bug == "no_rope":
        return x
    return x * cos + rotate_half(x) * sin


def model_logits(cf, P, batch, bug=None):
    """P: name -> tensor (any float dtype). Returns logits (T, V) at temperature 1."""
    H, K, D, C = cf["H"], cf["K"], cf["D"], cf["C"]
    dt = P["model.embed_tokens.weight"].dtype
    eps, theta = F32(cf["eps"]), F32(cf["rope_theta"])
    lens = [int(n) for n in batch["seq_len"]]
    T = sum(lens)
    tokens = torch.as_tensor(batch["tokens"], dtype=torch.long)
    seg = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(lens)])
    if bug == "global_positions":
        pos = torch.arange(T)
    else:
        pos = torch.cat([torch.arange(n) for n in lens])
    idx = torch.arange(T)
    allowed = idx[None, :] <= idx[:, None]                      # causal (t, u): u <= t
    if bug != "cross_sequence":
        allowed = allowed & (seg[None, :] == seg[:, None])      # never across sequences
    x = P["model.embed_tokens.weight"][tokens]
    rep = H // K
    for i in range(cf["L"]):
        p = "model.layers.%d." % i
        g = lambda n: P[p + n]
        h = rmsnorm(x, g("input_layernorm.weight"), eps, bug)
        q = h @ g("self_attn.q_proj.weight").T
        k = h @ g("self_attn.k_proj.weight").T
        v = h @ g("self_attn.v_proj.weight").T
        if cf["bias"]:
            q = q + g("self_attn.q_proj.bias")
            k = k + g("self_attn.k_proj.bias")
            v = v + g("self_attn.v_proj.bias")
        q, k, v = q.view(T, H, D), k.view(T, K, D), v.view(T, K, D)
        if cf["qk_norm"] and bug != "qk_norm_after_rope":
            q = rmsnorm(q, g("self_attn.q_norm.weight"), eps)
            k = rmsnorm(k, g("self_attn.k_norm.weight"), eps)
        q, k = rope(q, pos, D, theta, bug), rope(k, pos, D, theta, bug)
        if cf["qk_norm"] and bug == "qk_norm_after_rope":
            q = rmsnorm(q, g("self_attn.q_norm.weight"), eps)
            k = rmsnorm(k, g("self_attn.k_norm.weight"), eps)
        if bug == "gqa_modulo":  # head h reads kv head h % K instead of h / (H/K)
            kk, vv = k.repeat(1, rep, 1), v.repeat(1, rep, 1)
        else:                    # head h reads kv head h // rep (HF repeat_kv)
            kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scale = 1.0 / math.sqrt(C // H if bug == "scale_c_over_h" else D)
        sc = torch.einsum("thd,uhd->htu", q, kk) * scale
        sc = sc.masked_fill(~allowed[None, :, :], float("-inf"))
        a = torch.softmax(sc, dim=-1)
        o = torch.einsum("htu,uhd->thd", a, vv).reshape(T, H * D)
        x = x + o @ g("self_attn.o_proj.weight").T
        h = rmsnorm(x, g("post_attention_layernorm.weight"), eps, bug)
        gate, up = h @ g("mlp.gate_proj.weight").T, h @ g("mlp.up_proj.weight").T
        act = gate * torch.sigmoid(gate) if bug != "gelu" else torch.nn.functional.gelu(gate)
        x = x + (act * up) @ g("mlp.down_proj.weight").T
    x = rmsnorm(x, P["model.norm.weight"], eps, bug)
    head = P["model.embed_tokens.weight"] if cf["tie"] else P["lm_head.weight"]
    return x @ head.T


def score(cf, P, batch, bug=None):
    """logits (T,V), logprob (T), entropy (T), J (scalar tensor)."""
    logits = model_logits(cf, P, batch, bug)
    dt = logits.dtype
    temp = 1.0 if bug == "no_temperature" else float(batch["temperature"])
    lsm = torch.log_softmax(logits / temp, dim=-1)
    tg = torch.as_tensor(batch["targets"], dtype=torch.long)
    valid = tg >= 0
    lp = torch.where(valid, lsm.gather(1, tg.clamp(min=0)[:, None])[:, 0],
                     torch.zeros((), dtype=dt))
    ent = -(lsm.exp() * lsm).sum(-1)
    w = torch.as_tensor(batch["weights"]).to(dt)
    J = -(w * lp).sum()
    return logits, lp, ent, J


def torch_params(P, dtype):
    return {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in P.items()}


def gradients(cf, P, batch, dtype=torch.float64, bug=None):
    TP = torch_params(P, dtype)
    logits, lp, ent, J = score(cf, TP, batch, bug)
    J.backward()
    grads = {n: t.grad.detach().numpy().copy() for n, t in TP.items()}
    return (logits.detach().numpy(), lp.detach().numpy(), ent.detach().numpy(),
            float(J), grads)


# ---- optimizer -----------------------------------------------------------------------

def lr_at(ac, step):
    """adamw.h schedule, 1-based step, in float64 from the float32 settings."""
    lr = F32(ac["lr"])
    if ac["schedule"] == "constant":
        return lr
    w, tot, r = ac["warmup_steps"], ac["total_steps"], F32(ac["min_lr_ratio"])
    if w > 0 and step <= w:
        return lr * step / w
    prog = min(1.0, (step - w) / max(1, tot - w))
    return lr * (r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * prog)))


def adamw_trajectory(cf, P, batch, dtype=torch.float64, steps=5):
    """torch.optim.AdamW + clip_grad_norm_: losses (steps+1), norms (steps), lrs (steps)."""
    ac = cf["adamw"]
    TP = torch_params(P, dtype)
    params = list(TP.values())
    opt = torch.optim.AdamW(params, lr=F32(ac["lr"]), betas=(F32(ac["beta1"]), F32(ac["beta2"])),
                            eps=F32(ac["eps"]), weight_decay=F32(ac["weight_decay"]))
    losses, norms, lrs = [], [], []
    for s in range(1, steps + 1):
        opt.zero_grad()
        J = score(cf, TP, batch)[3]
        J.backward()
        losses.append(float(J))
        if F32(ac["clip_norm"]) > 0:
            n = torch.nn.utils.clip_grad_norm_(params, F32(ac["clip_norm"]))
        else:
            n = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params))
        norms.append(float(n))
        lrs.append(lr_at(ac, s))
        for gr in opt.param_groups:
            gr["lr"] = lrs[-1]
        opt.step()
    with torch.no_grad():
        losses.append(float(score(cf, TP, batch)[3]))
    return np.array(losses), np.array(norms), np.array(lrs)


def adamw_textbook(cf, P, batch, steps=5, bug=None):
    """The same trajectory with AdamW written out (float64), for validation; bug picks
    a classic optimizer mistake that the loss trajectory must expose."""
    ac = cf["adamw"]
    b1, b2, e = F32(ac["beta1"]), F32(ac["beta2"]), F32(ac["eps"])
    wd, clip = F32(ac["weight_decay"]), F32(ac["clip_norm"])
    X = {n: a.astype(np.float64) for n, a in P.items()}
    M = {n: np.zeros_like(a) for n, a in X.items()}
    Vm = {n: np.zeros_like(a) for n, a in X.items()}
    losses = []
    for s in range(1, steps + 1):
        TP = {n: torch.tensor(a, requires_grad=True) for n, a in X.items()}
        J = score(cf, TP, batch)[3]
        J.backward()
        losses.append(float(J))
        G = {n: t.grad.numpy().copy() for n, t in TP.items()}
        norm = math.sqrt(sum(float((g * g).sum()) for g in G.values()))
        if clip > 0 and bug != "no_clip":  # torch's clip_grad_norm_: + 1e-6, coef <= 1
            G = {n: g * min(1.0, clip / (norm + 1e-6)) for n, g in G.items()}
        lr = lr_at(ac, s) if bug != "warmup_zero_based" else (
            lr_at(ac, s - 1) if ac["schedule"] == "cosine" and s > 1 else
            (0.0 if ac["schedule"] == "cosine" else lr_at(ac, s)))
        if bug == "constant_lr":
            lr = F32(ac["lr"])
        for n in X:
            g = G[n]
            if bug == "coupled_decay":
                g = g + wd * X[n]
            else:
                X[n] = X[n] * (1.0 - lr * wd)
            M[n] = b1 * M[n] + (1 - b1) * g
            Vm[n] = b2 * Vm[n] + (1 - b2) * g * g
            if bug == "no_bias_correction":
                X[n] = X[n] - lr * M[n] / (np.sqrt(Vm[n]) + e)
            else:
                X[n] = X[n] - lr * (M[n] / (1 - b1 ** s)) / (np.sqrt(Vm[n] / (1 - b2 ** s)) + e)
    with torch.no_grad():
        losses.append(float(score(cf, {n: torch.tensor(a) for n, a in X.items()}, batch)[3]))
    return np.array(losses)


# ---- files ---------------------------------------------------------------------------

def write_model(path, cf, P):
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["model_type"] = cf["model_type"]
        a["hidden_size"] = cf["C"]
        a["num_hidden_layers"] = cf["L"]
        a["num_attention_heads"] = cf["H"]
        a["num_key_value_heads"] = cf["K"]
        a["head_dim"] = cf["D"]
        a["intermediate_size"] = cf["F"]
        a["vocab_size"] = cf["V"]
        a["rms_norm_eps"] = float(cf["eps"])
        a["rope_theta"] = float(cf["rope_theta"])
        a["tie_word_embeddings"] = int(cf["tie"])
        a["max_position_embeddings"] = 64
        a["attention_bias"] = int(cf["bias"])
        a["libra_format_version"] = 1
        for name, shape, _ in tensor_specs(cf):
            assert P[name].shape == shape
            f.create_dataset(name, data=P[name], dtype="<f4")


def write_golden(path, cf, batch, fwd, grads, traj):
    logits, lp, ent, J = fwd
    losses, norms, lrs = traj
    ac = cf["adamw"]
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["case"] = os.path.basename(path).split(".")[0]
        a["reference"] = "tools/torch-reference.py, float64 from the float32 model file"
        for k in ("seq_len", "tokens", "targets"):
            f.create_dataset(k, data=batch[k], dtype="<i4")
        f.create_dataset("weights", data=batch["weights"], dtype="<f4")
        a["temperature"] = np.float32(batch["temperature"])
        f.create_dataset("logits", data=logits.astype(np.float32))
        f.create_dataset("logprob", data=lp.astype(np.float32))
        f.create_dataset("entropy", data=ent.astype(np.float32))
        a["loss"] = np.float64(J)
        g = f.create_group("grads")
        for name, shape, _ in tensor_specs(cf):
            g.create_dataset(name, data=grads[name].astype(np.float32))
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "clip_norm", "min_lr_ratio"):
            a[k] = np.float32(ac[k])
        a["schedule"] = np.int32(0 if ac["schedule"] == "constant" else 1)
        a["schedule_name"] = ac["schedule"]
        a["warmup_steps"] = np.int64(ac["warmup_steps"])
        a["total_steps"] = np.int64(ac["total_steps"])
        f.create_dataset("adamw_losses", data=losses.astype(np.float64))
        f.create_dataset("adamw_grad_norms", data=norms.astype(np.float64))
        f.create_dataset("adamw_lrs", data=lrs.astype(np.float64))


# ---- validation ------------------------------------------------------------------------

def loop_reference(cf, P, batch):
    """tfm.h's formulas token by token, head by head, in plain numpy float64: an
    implementation independent of the vectorised one (no einsum, masks or repeat)."""
    H, K, D, C, L = cf["H"], cf["K"], cf["D"], cf["C"], cf["L"]
    eps, theta = F32(cf["eps"]), F32(cf["rope_theta"])
    W = {n: a.astype(np.float64) for n, a in P.items()}

    def rms(x, w):
        return x / math.sqrt(float(np.mean(x * x)) + eps) * w

    def rot(vec, pos):
        out = vec.copy()
        for i in range(D // 2):
            ang = pos * theta ** (-2.0 * i / D)
            c, s = math.cos(ang), math.sin(ang)
            out[i] = vec[i] * c - vec[i + D // 2] * s
            out[i + D // 2] = vec[i + D // 2] * c + vec[i] * s
        return out

    rows = []
    start = 0
    for n in batch["seq_len"]:
        toks = batch["tokens"][start:start + n]
        x = [W["model.embed_tokens.weight"][t].copy() for t in toks]
        for l in range(L):
            p = "model.layers.%d." % l
            Q, Kc, Vc = [], [], []
            for t in range(n):
                h = rms(x[t], W[p + "input_layernorm.weight"])
                q = W[p + "self_attn.q_proj.weight"] @ h
                k = W[p + "self_attn.k_proj.weight"] @ h
                v = W[p + "self_attn.v_proj.weight"] @ h
                if cf["bias"]:
                    q = q + W[p + "self_attn.q_proj.bias"]
                    k = k + W[p + "self_attn.k_proj.bias"]
                    v = v + W[p + "self_attn.v_proj.bias"]
                qh = [q[j * D:(j + 1) * D] for j in range(H)]
                kh = [k[j * D:(j + 1) * D] for j in range(K)]
                if cf["qk_norm"]:
                    qh = [rms(z, W[p + "self_attn.q_norm.weight"]) for z in qh]
                    kh = [rms(z, W[p + "self_attn.k_norm.weight"]) for z in kh]
                Q.append([rot(z, t) for z in qh])
                Kc.append([rot(z, t) for z in kh])
                Vc.append([v[j * D:(j + 1) * D] for j in range(K)])
            for t in range(n):
                o = np.zeros(H * D)
                for hh in range(H):
                    kv = hh // (H // K)
                    s = np.array([Q[t][hh] @ Kc[u][kv] / math.sqrt(D) for u in range(t + 1)])
                    e = np.exp(s - s.max())
                    e /= e.sum()
                    o[hh * D:(hh + 1) * D] = sum(e[u] * Vc[u][kv] for u in range(t + 1))
                x[t] = x[t] + W[p + "self_attn.o_proj.weight"] @ o
                h = rms(x[t], W[p + "post_attention_layernorm.weight"])
                gt = W[p + "mlp.gate_proj.weight"] @ h
                up = W[p + "mlp.up_proj.weight"] @ h
                x[t] = x[t] + W[p + "mlp.down_proj.weight"] @ (gt / (1 + np.exp(-gt)) * up)
        head = W["model.embed_tokens.weight"] if cf["tie"] else W["lm_head.weight"]
        for t in range(n):
            rows.append(head @ rms(x[t], W["model.norm.weight"]))
        start += n
    return np.array(rows)


def tensor_err(a, b):
    """max |a - b| / max|b| over the tensor: the C test's metric (passes if <= 1e-4)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.abs(b).max()
    return float(np.abs(a - b).max() / scale) if scale > 0 else float(np.abs(a - b).max())


def validate(cf, name, P, batch, fwd, grads, traj):
    ok = True

    def check(what, val, lim):
        nonlocal ok
        good = val <= lim
        ok &= good
        print("  %-58s %.3e  (limit %.0e) %s" % (what, val, lim, "ok" if good else "FAIL"))

    print("validating", name)
    logits, lp, ent, J = fwd
    # 1. independent loop implementation of the forward
    check("logits vs loop-by-loop numpy forward", tensor_err(loop_reference(cf, P, batch),
                                                              logits), 1e-12)
    # 2. packing: every sequence alone (positions from 0) gives the same logits
    start, worst = 0, 0.0
    for n in batch["seq_len"]:
        one = dict(batch, seq_len=np.array([n], np.int32),
                   tokens=batch["tokens"][start:start + n])
        with torch.no_grad():
            lg = model_logits(cf, torch_params(P, torch.float64), one).numpy()
        worst = max(worst, tensor_err(lg, logits[start:start + n]))
        start += n
    check("packed batch vs each sequence alone", worst, 1e-13)
    # 3. log-prob, entropy, J from their definitions
    z = logits / float(batch["temperature"])
    z = z - z.max(1, keepdims=True)
    lz = z - np.log(np.exp(z).sum(1, keepdims=True))
    tg = batch["targets"]
    lp2 = np.where(tg >= 0, lz[np.arange(len(tg)), np.maximum(tg, 0)], 0.0)
    check("logprob vs numpy log-softmax", tensor_err(lp2, lp), 1e-13)
    check("entropy vs numpy", tensor_err(-(np.exp(lz) * lz).sum(1), ent), 1e-13)
    check("J vs -sum w logprob", abs(-(batch["weights"].astype(np.float64) * lp2).sum() - J)
          / abs(J), 1e-13)
    # 4. autograd vs central finite differences, per tensor, random direction
    rng = np.random.default_rng(7)
    Pd = {n: a.astype(np.float64) for n, a in P.items()}

    def J_of(Q):
        with torch.no_grad():
            return float(score(cf, {n: torch.tensor(a) for n, a in Q.items()}, batch)[3])

    worst = 0.0
    for n in Pd:
        d = rng.normal(size=Pd[n].shape)
        hstep = 1e-5  # truncation ~h^2 (seen to fall 100x per 10x in h), rounding ~1e-11
        Qp, Qm = dict(Pd), dict(Pd)
        Qp[n] = Pd[n] + hstep * d
        Qm[n] = Pd[n] - hstep * d
        fd = (J_of(Qp) - J_of(Qm)) / (2 * hstep)
        an = float((grads[n] * d).sum())
        worst = max(worst, abs(fd - an) / (np.linalg.norm(grads[n]) * np.linalg.norm(d)))
    check("autograd vs finite differences, |fd - g.d| / (|g| |d|)", worst, 1e-6)
    # 5. torch.optim.AdamW vs the textbook update on a random problem
    ac = cf["adamw"]
    b1, b2, e, wd = F32(ac["beta1"]), F32(ac["beta2"]), F32(ac["eps"]), F32(ac["weight_decay"])
    x0 = rng.normal(size=50)
    xt = torch.tensor(x0, requires_grad=True)
    opt = torch.optim.AdamW([xt], lr=0.1, betas=(b1, b2), eps=e, weight_decay=wd)
    x, m, v = x0.copy(), np.zeros(50), np.zeros(50)
    for s in range(1, 6):
        lr = lr_at(ac, s)
        opt.zero_grad()
        (xt ** 4).sum().backward()
        for gr in opt.param_groups:
            gr["lr"] = lr
        opt.step()
        gx = 4 * x ** 3
        x = x * (1 - lr * wd)
        m = b1 * m + (1 - b1) * gx
        v = b2 * v + (1 - b2) * gx * gx
        x = x - lr * (m / (1 - b1 ** s)) / (np.sqrt(v / (1 - b2 ** s)) + e)
    check("torch AdamW vs textbook update", float(np.abs(xt.detach().numpy() - x).max()), 1e-12)
    losses, norms, lrs = traj
    clip = F32(ac["clip_norm"])
    print("  adamw: losses %s" % np.array2string(losses, precision=6))
    print("         norms  %s (clip_norm %g: %d of 5 steps clipped)"
          % (np.array2string(norms, precision=4), clip, int((norms > clip).sum()) if clip > 0
             else 0))
    print("         lrs    %s" % np.array2string(lrs, precision=6))
    check("AdamW trajectory vs textbook AdamW (relative loss)",
          float(np.max(np.abs(adamw_textbook(cf, P, batch) - losses) / losses)), 1e-12)
    for bug in ("no_bias_correction", "coupled_decay", "no_clip", "warmup_zero_based",
                "constant_lr"):
        if (bug == "no_clip" and clip <= 0) or (bug in ("warmup_zero_based", "constant_lr")
                                                and ac["schedule"] == "constant"):
            continue
        err = float(np.max(np.abs(adamw_textbook(cf, P, batch, bug=bug) - losses) / losses))
        caught = err > 10 * TOL_LOSS
        ok &= caught
        print("  optimizer mutant %-20s loss err %.2e  %s"
              % (bug, err, "caught" if caught else "NOT CAUGHT"))
    # 6. a float32 run of the same code passes the C test's tolerances
    l32, lp32, en32, J32, g32 = gradients(cf, P, batch, torch.float32)
    worst = max(tensor_err(l32, logits), tensor_err(lp32, lp), tensor_err(en32, ent))
    check("float32 run: logits/logprob/entropy (C-test metric)", worst, TOL_TENSOR / 10)
    worst = max(tensor_err(g32[n], grads[n]) for n in grads)
    check("float32 run: worst gradient (C-test metric)", worst, TOL_TENSOR / 10)
    los32, nor32, _ = adamw_trajectory(cf, P, batch, torch.float32)
    check("float32 run: AdamW losses, relative", float(np.max(np.abs(los32 - losses)
                                                               / np.abs(losses))), TOL_LOSS / 10)
    check("float32 run: AdamW grad norms, relative", float(np.max(np.abs(nor32 - norms)
                                                                  / norms)), TOL_TENSOR / 10)
    # 7. mutants: each classic bug must fail the C test somewhere
    # (Positions that do not restart per sequence are no mutant: rotary scores depend
    # only on position differences, so in exact arithmetic nothing would change.)
    mutants = ["rope_interleaved", "no_rope", "cross_sequence",
               "scale_c_over_h", "no_temperature", "rms_eps_outside", "gelu"]
    if cf["K"] not in (1, cf["H"]):
        mutants.append("gqa_modulo")
    if cf["qk_norm"]:
        mutants.append("qk_norm_after_rope")
    if cf["C"] // cf["H"] == cf["D"]:
        mutants.remove("scale_c_over_h")
    for bug in mutants:
        ml, mlp, ment, mJ, mg = gradients(cf, P, batch, bug=bug)
        e_fwd = max(tensor_err(ml, logits), tensor_err(mlp, lp), tensor_err(ment, ent))
        e_grad = max(tensor_err(mg[n], grads[n]) for n in grads)
        caught = max(e_fwd, e_grad) > 10 * TOL_TENSOR
        ok &= caught
        print("  mutant %-20s forward err %.2e  worst grad err %.2e  %s"
              % (bug, e_fwd, e_grad, "caught" if caught else "NOT CAUGHT"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "golden")))
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--validate", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ok = True
    for name in args.case or list(CASES):
        cf = CASES[name]
        P = random_params(cf)
        batch = random_batch(cf)
        logits, lp, ent, J, grads = gradients(cf, P, batch)
        traj = adamw_trajectory(cf, P, batch)
        if args.validate:
            ok &= validate(cf, name, P, batch, (logits, lp, ent, J), grads, traj)
        write_model(os.path.join(args.out, name + ".model.h5"), cf, P)
        write_golden(os.path.join(args.out, name + ".golden.h5"), cf, batch,
                     (logits, lp, ent, J), grads, traj)
        print("%s: T=%d J=%.9f -> %s/%s.{model,golden}.h5" % (name, len(batch["tokens"]), J,
                                                              args.out, name))
    if not ok:
        print("VALIDATION FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
