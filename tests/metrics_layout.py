"""Checks metrics files against docs/metrics.md, the layout an analyst reads.

    metrics_layout.py DOCS.md RUN.h5 [RUN.h5 ...]

For every table section of the document ("### `/name` ..." followed by a
"| column | type | units | meaning |" table) that a file holds: the file's columns are
exactly the documented ones, in the documented order, each with the documented type
(int32, int64, float64, string[N], string for variable length, enum) and its
"units.<column>" attribute equal to the documented units; the table has a
"description" attribute. An enum column's names and codes are exactly those of the
document's "### Enumerations" table. A documented table may be
absent from one file (the scheduler's tables belong to cmlfq runs, /eval to real-model
runs), but every table of the files must be documented, and each documented table must
appear in at least one of the files given. The root attributes of the first table of
"## Root attributes" must be in every file with their documented types, and /config
must hold one group per section with typed attributes. Prints one line per finding and
exits 1 if there is any.
"""
import re
import sys

import h5py
import numpy

TYPES = {"int32": numpy.dtype("<i4"), "int64": numpy.dtype("<i8"),
         "float64": numpy.dtype("<f8")}


def parse_doc(path):
    """{table: [(column, type, units)]}, [(root attribute, type)] and
    {(table, column): {name: code}} of the enumerations."""
    tables, roots, enums = {}, [], {}
    section, in_root = None, False
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        m = re.match(r"^\| `/([a-z_]+)` `([a-z_]+)` \| (.*) \|$", line)
        if m:  # a row of the Enumerations table: "| `/t` `c` | 0 `a`, 1 `b` |"
            enums[(m.group(1), m.group(2))] = {
                n: int(v) for v, n in re.findall(r"(-?\d+) `([a-z_]+)`", m.group(3))}
            continue
        m = re.match(r"^### `/([a-z_]+)`", line)
        if m:
            section, in_root = m.group(1), False
            continue
        if line.startswith("## Groups written by other modules"):
            break  # groups (/tree, /config) are not tables
        if line.startswith("## "):
            section, in_root = None, line.startswith("## Root attributes")
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 3 or not cells[0].startswith("`"):
            if in_root and roots and not line.startswith("|"):
                in_root = False  # only the first table: the fixed root attributes
            continue
        name = cells[0].strip("`")
        if in_root:
            roots.append((name, cells[1]))
        elif section and len(cells) >= 4:
            tables.setdefault(section, []).append((name, cells[1], cells[2]))
    return tables, roots, enums


def type_name(dt):
    if h5py.check_enum_dtype(dt) is not None:
        return "enum"
    if dt.kind == "S":
        return "string[%d]" % dt.itemsize
    if h5py.check_string_dtype(dt) is not None:
        return "string"  # variable length
    for name, want in TYPES.items():
        if dt == want:
            return name
    return str(dt)


def check_file(path, tables, roots, enums, problems, seen):
    f = h5py.File(path, "r")
    for name, typ in roots:
        if name not in f.attrs:
            problems.append("%s: root attribute %s is documented but missing" % (path, name))
            continue
        v = f.attrs[name]
        ok = (typ.startswith("string") and isinstance(v, (str, bytes))) or \
             (typ == "int64" and numpy.asarray(v).dtype == numpy.dtype("<i8"))
        if not ok:
            problems.append("%s: root attribute %s is %r, documented %s" % (path, name, type(v), typ))
    for key, obj in f.items():
        if not isinstance(obj, h5py.Dataset):
            continue
        if key not in tables:
            problems.append("%s: table /%s is not documented in docs/metrics.md" % (path, key))
            continue
        seen.add(key)
        doc = tables[key]
        names = obj.dtype.names or ()
        if list(names) != [c for c, _, _ in doc]:
            extra = [n for n in names if n not in [c for c, _, _ in doc]]
            missing = [c for c, _, _ in doc if c not in names]
            problems.append("%s: /%s columns differ from the document (undocumented: %s; "
                            "documented but absent: %s)" % (path, key, extra or "none",
                                                           missing or "none (order)"))
        if "description" not in obj.attrs:
            problems.append("%s: /%s has no description attribute" % (path, key))
        for col, typ, units in doc:
            if col not in names:
                continue
            got = type_name(obj.dtype.fields[col][0])
            if got != typ:
                problems.append("%s: /%s.%s is %s, documented %s" % (path, key, col, got, typ))
            if got == "enum":
                have = h5py.check_enum_dtype(obj.dtype.fields[col][0])
                want = enums.get((key, col))
                if want is None:
                    problems.append("%s: /%s.%s is an enum missing from the Enumerations table"
                                    % (path, key, col))
                elif have != want:
                    problems.append("%s: /%s.%s enum is %s, documented %s"
                                    % (path, key, col, sorted(have.items(), key=lambda x: x[1]),
                                       sorted(want.items(), key=lambda x: x[1])))
            u = obj.attrs.get("units." + col)
            u = u.decode() if isinstance(u, bytes) else u
            if u != units:
                problems.append("%s: /%s units.%s is %r, documented %r" % (path, key, col, u, units))
    if "config" in f and isinstance(f["config"], h5py.Group):
        if "run" not in f["config"] or "steps" not in f["config/run"].attrs:
            problems.append("%s: /config/run has no steps attribute" % path)
        elif numpy.asarray(f["config/run"].attrs["steps"]).dtype != numpy.dtype("<i8"):
            problems.append("%s: /config/run steps is not an int64" % path)
    else:
        problems.append("%s: no /config group" % path)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    tables, roots, enums = parse_doc(argv[1])
    if len(tables) < 8 or len(roots) < 5 or len(enums) < 7:
        print("metrics_layout: FAIL: read %d tables, %d root attributes and %d enumerations "
              "from %s" % (len(tables), len(roots), len(enums), argv[1]))
        return 1
    problems, seen = [], set()
    for path in argv[2:]:
        check_file(path, tables, roots, enums, problems, seen)
    for (t, c) in sorted(enums):
        if (c, "enum") not in [(n, ty) for n, ty, _ in tables.get(t, [])]:
            problems.append("enumeration /%s.%s is not an enum column of a documented table"
                            % (t, c))
    for key in sorted(set(tables) - seen):
        problems.append("documented table /%s is in none of the files checked" % key)
    for p in problems:
        print("metrics_layout: FAIL: " + p)
    if not problems:
        print("metrics_layout: OK: %d tables, %d columns, %d root attributes as documented"
              % (len(seen), sum(len(tables[k]) for k in seen), len(roots)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
