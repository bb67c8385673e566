#!/usr/bin/env python3
"""
PyTorch reference for the C transformer (include/libra/tfm.h) and its optimizer
(include/libra/adamw.h): writes the golden files that tests/test_golden.c checks.

    /usr/bin/python3 tools/torch-reference.py              # writes tests/golden/*.h5
    /usr/bin/python3 tools/torch-reference.py --validate   # the same, plus self-checks
    /usr/bin/python3 tools/torch-reference.py --out DIR --case qwen3-gqa-tied
    /usr/bin/python3 tools/torch-reference.py --rope-golden tests/golden/rope.txt --validate
    /usr/bin/python3 tools/torch-reference.py --hf DIR --tokens FILE --logits OUT.h5 \
        [--validate] [--bug MUTANT]

--rope-golden writes the rotary tables of ROPE_CASES as transformers computes them
(hf_rope_init: default, linear, llama3, yarn, float32 in torch's order of operations;
--validate checks them against a float64 element-by-element writing of the formulas)
for tests/test_rope.c. --hf reads a Hugging Face model directory (config.json of
model_type llama / qwen2 / qwen3, model.safetensors or the shards of
model.safetensors.index.json, read by our own safetensors reader; F32, F16, BF16) and
writes the logits (T, V) of the token ids in FILE as one sequence: float64 from the
stored weights widened to float32, the rotary frequencies HF's float32 ones
(rope_scaling included); float32 to OUT (.npy, or HDF5 dataset /logits). --validate
checks them against the loop-by-loop forward; --bug computes them with a classic
mistake (no_rope_scaling, rope_interleaved, ...) for tests/hf_parity.sh's self-check.

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
import json
import math
import os
import struct
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


def rope_freqs(cf, bug=None):
    """(inv_freq (D/2) float64, attention scaling a) of a case. The golden cases: the
    plain formula theta^(-2i/D) in float64. A Hugging Face model (cf["rope"] set): the
    float32 frequencies transformers computes (hf_rope_init, rope_scaling included),
    then everything else in float64."""
    D = cf["D"]
    if "rope" in cf:
        scaling = None if bug == "no_rope_scaling" else cf["rope"]["scaling"]
        inv, a = hf_rope_init(D, cf["rope_theta"], cf["rope"]["max_pos"], scaling)
        return inv.to(torch.float64), float(np.float32(a))
    theta = F32(cf["rope_theta"])
    return 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)), 1.0


def rope(x, pos, freqs, bug=None):
    """x (T, n, D); HF rotate-half: pairs (i, i + D/2), angle pos * inv_freq_i, cos and
    sin times the attention scaling a; freqs = rope_freqs(cf)."""
    inv, a = freqs
    ang = pos.to(x.dtype)[:, None] * inv.to(x.dtype)[None, :]       # (T, D/2)
    if bug == "rope_interleaved":  # GPT-J / Meta pairing (2i, 2i+1): the classic mix-up
        c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y0, y1 = x0 * c - x1 * s, x1 * c + x0 * s
        return torch.stack((y0, y1), dim=-1).reshape(x.shape)
    cos = torch.cat((torch.cos(ang), torch.cos(ang)), -1)[:, None, :] * a
    sin = torch.cat((torch.sin(ang), torch.sin(ang)), -1)[:, None, :] * a
    if bug == "no_rope":
        return x
    return x * cos + rotate_half(x) * sin


def model_logits(cf, P, batch, bug=None):
    """P: name -> tensor (any float dtype). Returns logits (T, V) at temperature 1."""
    H, K, D, C = cf["H"], cf["K"], cf["D"], cf["C"]
    dt = P["model.embed_tokens.weight"].dtype
    eps, freqs = F32(cf["eps"]), rope_freqs(cf, bug)
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
        q, k = rope(q, pos, freqs, bug), rope(k, pos, freqs, bug)
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


# ---- rotary frequencies as Hugging Face computes them ------------------------------------

def rope_kind(scaling):
    """config.json rope_scaling -> "default" | "linear" | "llama3" | "yarn" (the old key
    "type" too); other types are refused, as by libra."""
    if not scaling:
        return "default"
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ("default", "linear", "llama3", "yarn"):
        raise SystemExit("rope_scaling type %r is not supported (default, linear, llama3, "
                         "yarn)" % kind)
    for key in ("mscale", "mscale_all_dim"):
        if scaling.get(key):
            raise SystemExit("rope_scaling %s is not supported" % key)
    if scaling.get("truncate", True) is not True:
        raise SystemExit("rope_scaling truncate = false is not supported")
    return kind


def hf_rope_init(D, theta, max_pos, scaling):
    """(inv_freq float32 tensor (D/2), attention scaling a: a Python float) the way
    transformers' ROPE_INIT_FUNCTIONS compute them, written from their formulas: float32
    tensors with Python floats as scalars (torch casts a scalar to float32 where it meets
    a tensor; `y / tensor` is reciprocal(tensor) * y in torch), i < D/2:

      default  w_i = 1 / theta^(2i/D)                                          a = 1
      linear   w_i = default / factor                                          a = 1
      llama3   L = original_max_position_embeddings, lambda_i = 2 pi / w_i,
               lambda_lo = L / low_freq_factor, lambda_hi = L / high_freq_factor;
               w_i / factor where lambda_i > lambda_lo (low frequencies), w_i where
               lambda_i < lambda_hi (high), else with s = (L / lambda_i - low) /
               (high - low):  (1 - s) w_i / factor + s w_i                      a = 1
      yarn     L = original_max_position_embeddings (absent: max_position_embeddings),
               d(r) = D ln(L / (2 pi r)) / (2 ln theta), lo = max(floor(d(beta_fast)), 0),
               hi = min(ceil(d(beta_slow)), D - 1) (hi += 0.001 if equal), beta_fast /
               beta_slow default 32 / 1; ramp_i = clamp((i - lo) / (hi - lo), 0, 1),
               e_i = 1 - ramp_i, p_i = theta^(2i/D):
               w_i = 1 / (factor p_i) (1 - e_i) + 1 / p_i e_i;
               a = attention_factor, default 0.1 ln(factor) + 1 (1 if factor <= 1).
    The yarn factor is rope_scaling's "factor" (current transformers; 4.50-4.5x used
    max_position_embeddings / L instead when L was given, earlier versions ignored L)."""
    f32 = torch.float32
    kind = rope_kind(scaling)
    pos_freq = theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(f32) / D)
    if kind == "yarn":
        factor = scaling["factor"]
        L = scaling.get("original_max_position_embeddings") or max_pos
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1

        def dim_of(turns):
            return (D * math.log(L / (turns * 2 * math.pi))) / (2 * math.log(theta))

        lo = max(math.floor(dim_of(beta_fast)), 0)
        hi = min(math.ceil(dim_of(beta_slow)), D - 1)
        if lo == hi:
            hi += 0.001
        ramp = torch.clamp((torch.arange(D // 2, dtype=f32) - lo) / (hi - lo), 0, 1)
        e = 1 - ramp
        inv = (1.0 / (factor * pos_freq)) * (1 - e) + (1.0 / pos_freq) * e
        a = scaling.get("attention_factor")
        if not a:
            a = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
        return inv, float(a)
    inv = 1.0 / pos_freq
    if kind == "default":
        return inv, 1.0
    factor = scaling["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    L, low, high = (scaling["original_max_position_embeddings"], scaling["low_freq_factor"],
                    scaling["high_freq_factor"])
    lam = 2 * math.pi / inv
    lam_lo, lam_hi = L / low, L / high
    base = torch.where(lam > lam_lo, inv / factor, inv)
    s = (L / lam - low) / (high - low)
    smooth = (1 - s) * base / factor + s * base
    mid = ~(lam < lam_hi) & ~(lam > lam_lo)
    return torch.where(mid, smooth, base), 1.0


def rope_freqs_loop(D, theta, max_pos, scaling):
    """The same frequencies, element by element in float64 with plain branches (an
    independent writing of the formulas, for --validate): list w, a."""
    kind = rope_kind(scaling)
    w = [theta ** (-2.0 * i / D) for i in range(D // 2)]
    if kind == "default":
        return w, 1.0
    factor = float(scaling["factor"])
    if kind == "linear":
        return [x / factor for x in w], 1.0
    if kind == "llama3":
        L = float(scaling["original_max_position_embeddings"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        out = []
        for x in w:
            wavelength = 2 * math.pi / x
            if wavelength < L / high:
                out.append(x)
            elif wavelength > L / low:
                out.append(x / factor)
            else:
                s = (L / wavelength - low) / (high - low)
                out.append((1 - s) * x / factor + s * x)
        return out, 1.0
    L = float(scaling.get("original_max_position_embeddings") or max_pos)
    turns_fast = float(scaling.get("beta_fast") or 32)
    turns_slow = float(scaling.get("beta_slow") or 1)
    # the pair index i whose wavelength 2 pi theta^(2i/D) fits `turns` times into L
    pair = lambda turns: D / 2 * math.log(L / (2 * math.pi * turns)) / math.log(theta)
    lo, hi = max(math.floor(pair(turns_fast)), 0), min(math.ceil(pair(turns_slow)), D - 1)
    width = (hi - lo) if hi != lo else 0.001
    out = []
    for i, x in enumerate(w):
        ramp = min(1.0, max(0.0, (i - lo) / width))  # 0: keep (extrapolate), 1: interpolate
        out.append(x / factor * ramp + x * (1 - ramp))
    a = float(scaling.get("attention_factor") or
              (1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0))
    return out, a


# Cases of tests/golden/rope.txt (tests/test_rope.c): D, theta, max_position_embeddings,
# rope_scaling (config.json's dict).
ROPE_CASES = [
    ("default-d64", 64, 10000.0, 4096, None),
    ("default-d128-theta1e6", 128, 1e6, 32768, None),
    ("linear-f4", 64, 10000.0, 16384, dict(rope_type="linear", factor=4.0)),
    ("llama3-d128", 128, 500000.0, 131072,
     dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
          original_max_position_embeddings=8192)),
    ("llama3-d64", 64, 500000.0, 131072,
     dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
          original_max_position_embeddings=8192)),
    ("yarn-f4", 128, 1e6, 16384,
     dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=4096)),
    ("yarn-explicit", 64, 10000.0, 8192,
     dict(type="yarn", factor=2.5, original_max_position_embeddings=2048, beta_fast=16.0,
          beta_slow=2.0, attention_factor=1.25)),
    ("yarn-no-original", 32, 10000.0, 2048, dict(rope_type="yarn", factor=2.0)),
]
ROPE_POSITIONS = [0, 1, 3, 100, 1000, 8191, 32767, 131071]


def write_rope_golden(path, validate):
    """tests/golden/rope.txt: per case its config, HF's attention scaling, inv_freq and
    the cos | sin rows (cos(p w) * a then sin(p w) * a, all float32 as HF: the angle
    one float32 product, torch's float32 cos / sin), %.9g (float32 round trip)."""
    ok = True
    lines = ["# Rotary tables as Hugging Face computes them: tools/torch-reference.py "
             "--rope-golden (torch %s)." % torch.__version__,
             "# case NAME D rope_theta max_position_embeddings rope_type factor "
             "low_freq_factor high_freq_factor original_max_position_embeddings beta_fast "
             "beta_slow attention_factor (0 = absent) n_positions",
             "# scale A | inv_freq w_0 .. w_{D/2-1} | pos P cos_0 .. cos_{D/2-1} sin_0 .. "
             "sin_{D/2-1}"]
    for name, D, theta, max_pos, sc in ROPE_CASES:
        inv, a = hf_rope_init(D, theta, max_pos, sc)
        a32 = np.float32(a)
        if validate:
            ref, ra = rope_freqs_loop(D, theta, max_pos, sc)
            err = float(np.max(np.abs(inv.numpy().astype(np.float64) - ref) / np.array(ref)))
            good = err < 1e-6 and abs(ra - a) < 1e-15
            ok &= good
            print("  rope %-22s float32 HF vs float64 loop: %.2e relative  %s"
                  % (name, err, "ok" if good else "FAIL"))
        sc = sc or {}
        kind = rope_kind(sc)
        g = lambda k: float(sc.get(k) or 0)
        lines.append("case %s %d %.9g %d %s %.9g %.9g %.9g %d %.9g %.9g %.9g %d" % (
            name, D, theta, max_pos, kind, g("factor"), g("low_freq_factor"),
            g("high_freq_factor"), int(sc.get("original_max_position_embeddings") or 0),
            g("beta_fast"), g("beta_slow"), g("attention_factor"), len(ROPE_POSITIONS)))
        lines.append("scale %.9g" % a32)
        lines.append("inv_freq " + " ".join("%.9g" % v for v in inv.numpy()))
        pos = torch.tensor(ROPE_POSITIONS, dtype=torch.float32)
        ang = pos[:, None] * inv[None, :]  # HF: float32 inv_freq @ float32 positions
        cos, sin = torch.cos(ang) * a, torch.sin(ang) * a
        for r, p in enumerate(ROPE_POSITIONS):
            lines.append("pos %d " % p + " ".join("%.9g" % v for v in cos[r].numpy()) + " "
                         + " ".join("%.9g" % v for v in sin[r].numpy()))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("rope golden: %d cases -> %s" % (len(ROPE_CASES), path))
    return ok


# ---- Hugging Face directories (--hf) ---------------------------------------------------

# safetensors dtypes -> (numpy dtype of the raw little-endian data, bytes per element)
ST_DTYPES = {"F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}


def read_safetensors(path):
    """name -> float32 numpy array. The format: an 8-byte little-endian header length
    n, n bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, __metadata__},
    then the data, offsets relative to its start. bf16 widens exactly to float32 (its
    16 bits are the top half of a float32)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SystemExit("%s: not a safetensors file (%d bytes)" % (path, len(blob)))
    n = struct.unpack("<Q", blob[:8])[0]
    if 8 + n > len(blob):
        raise SystemExit("%s: header of %d bytes runs past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in ST_DTYPES:
            raise SystemExit("%s: %s has dtype %s (supported: %s)"
                             % (path, name, info["dtype"], ", ".join(ST_DTYPES)))
        npdt, size = ST_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * size or end > len(data):
            raise SystemExit("%s: %s: data_offsets %s do not hold %s %s" % (
                path, name, info["data_offsets"], shape, info["dtype"]))
        raw = np.frombuffer(data[begin:end], dtype=npdt)
        if info["dtype"] == "BF16":
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.astype(np.float32)
        out[name] = arr.reshape(shape)
    return out


def read_hf_weights(d):
    """Every tensor of a Hugging Face directory: model.safetensors, or the shards that
    model.safetensors.index.json's weight_map names (each must hold its tensors)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wmap = json.load(f)["weight_map"]
        P = {}
        for shard in sorted(set(wmap.values())):
            part = read_safetensors(os.path.join(d, shard))
            for name in part:
                if wmap.get(name) != shard:
                    raise SystemExit("%s: %s holds %s, which the index puts in %s"
                                     % (d, shard, name, wmap.get(name)))
            P.update(part)
        missing = sorted(set(wmap) - set(P))
        if missing:
            raise SystemExit("%s: the index names tensors no shard holds: %s" % (d, missing[:5]))
        return P
    single = os.path.join(d, "model.safetensors")
    if not os.path.exists(single):
        raise SystemExit("%s: neither model.safetensors nor model.safetensors.index.json" % d)
    return read_safetensors(single)


def hf_case(d):
    """The model of a Hugging Face directory as a case dict (the keys CASES use, plus
    "rope") and its weights (name -> float32), checked against tensor_specs."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    mt = cfg.get("model_type")
    if mt not in ("llama", "qwen2", "qwen3"):
        raise SystemExit("%s: model_type %r is not supported (llama, qwen2, qwen3)" % (d, mt))
    if cfg.get("mlp_bias"):
        raise SystemExit("%s: mlp_bias is not supported" % d)
    H = cfg["num_attention_heads"]
    cf = dict(model_type=mt, V=cfg["vocab_size"], C=cfg["hidden_size"],
              L=cfg["num_hidden_layers"], H=H, K=cfg.get("num_key_value_heads") or H,
              D=cfg.get("head_dim") or cfg["hidden_size"] // H, F=cfg["intermediate_size"],
              # the three configs default to untied; qwen2 always has q/k/v biases
              tie=int(bool(cfg.get("tie_word_embeddings", False))),
              bias=int(mt == "qwen2" or bool(cfg.get("attention_bias", False))),
              qk_norm=int(mt == "qwen3"), eps=cfg.get("rms_norm_eps", 1e-6),
              rope_theta=float(cfg.get("rope_theta", 10000.0)),
              rope=dict(max_pos=cfg.get("max_position_embeddings", 2048),
                        scaling=cfg.get("rope_scaling")))
    rope_kind(cf["rope"]["scaling"])
    P = read_hf_weights(d)
    if cf["tie"]:
        P.pop("lm_head.weight", None)  # HF ties it to the embedding whatever is stored
    specs = tensor_specs(cf)
    want = {name for name, _, _ in specs}
    extra = sorted(set(P) - want)
    if extra:
        raise SystemExit("%s: tensors this architecture does not have: %s" % (d, extra[:5]))
    for name, shape, _ in specs:
        if name not in P:
            raise SystemExit("%s: tensor %s is missing" % (d, name))
        if P[name].shape != shape:
            raise SystemExit("%s: %s has shape %s, the config implies %s"
                             % (d, name, P[name].shape, shape))
    return cf, P


def read_tokens(path, V):
    with open(path) as f:
        ids = [int(w) for w in f.read().split()]
    if not ids or min(ids) < 0 or max(ids) >= V:
        raise SystemExit("%s: need token ids in [0, %d), got %d ids" % (path, V, len(ids)))
    return np.array(ids, dtype=np.int32)


def hf_logits(args):
    """--hf DIR --tokens FILE --logits OUT: logits (T, V) of one sequence, float64 from
    the stored weights widened to float32, written as float32 to OUT (.npy, or HDF5
    dataset /logits)."""
    cf, P = hf_case(args.hf)
    tokens = read_tokens(args.tokens, cf["V"])
    batch = dict(seq_len=np.array([len(tokens)], np.int32), tokens=tokens)
    with torch.no_grad():
        logits = model_logits(cf, {n: torch.tensor(a, dtype=torch.float64) for n, a in P.items()},
                              batch, args.bug).numpy()
    ok = True
    if args.validate and not args.bug:
        err = tensor_err(loop_reference(cf, P, batch), logits)
        ok = err < 1e-12
        print("  logits vs loop-by-loop numpy forward: %.3e (limit 1e-12) %s"
              % (err, "ok" if ok else "FAIL"))
    out = logits.astype(np.float32)
    if args.logits.endswith(".npy"):
        np.save(args.logits, out)
    else:
        with h5py.File(args.logits, "w") as f:
            f.create_dataset("logits", data=out)
            f.attrs["reference"] = "tools/torch-reference.py --hf %s" % args.hf
    inv, a = rope_freqs(cf)
    print("%s: %s, rope %s (scaling %.6g), T=%d V=%d -> %s" % (
        args.hf, cf["model_type"], rope_kind(cf["rope"]["scaling"]), a, len(tokens), cf["V"],
        args.logits))
    return ok


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
    if "rope" in cf:  # HF's float32 frequencies (hf_rope_init), as plain floats
        inv32, a32 = hf_rope_init(D, cf["rope_theta"], cf["rope"]["max_pos"],
                                  cf["rope"]["scaling"])
        freq, ascale = [float(v) for v in inv32], float(np.float32(a32))
    else:
        freq, ascale = [theta ** (-2.0 * i / D) for i in range(D // 2)], 1.0

    def rms(x, w):
        return x / math.sqrt(float(np.mean(x * x)) + eps) * w

    def rot(vec, pos):
        out = vec.copy()
        for i in range(D // 2):
            ang = pos * freq[i]
            c, s = math.cos(ang) * ascale, math.sin(ang) * ascale
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
    ap.add_argument("--rope-golden", metavar="FILE",
                    help="write the rotary tables of ROPE_CASES (tests/golden/rope.txt) only")
    ap.add_argument("--hf", metavar="DIR", help="a Hugging Face model directory: write the "
                    "logits of --tokens to --logits only")
    ap.add_argument("--tokens", metavar="FILE", help="--hf: whitespace-separated token ids")
    ap.add_argument("--logits", metavar="OUT", help="--hf: OUT.npy, or HDF5 (dataset /logits)")
    ap.add_argument("--bug", metavar="MUTANT", help="--hf: compute with a classic bug (e.g. "
                    "no_rope_scaling, rope_interleaved), so that a parity test can show it "
                    "would notice it")
    args = ap.parse_args()
    if args.rope_golden:
        return 0 if write_rope_golden(args.rope_golden, args.validate) else 1
    if args.hf:
        if not args.tokens or not args.logits:
            ap.error("--hf needs --tokens and --logits")
        return 0 if hf_logits(args) else 1
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
