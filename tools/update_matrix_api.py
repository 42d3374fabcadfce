"""Write the ``api`` field ("public" | "internal") of every symbol into the compat matrix.

    python tools/update_matrix_api.py /tmp/rayref/bin/python

runs ``tools/ray_api_levels.py`` under that interpreter (one with real Ray) for every module
data file and sets ``api = "..."`` on the line after each ``[symbols.NAME]`` header, leaving
everything else in the files as it is. Symbols the tool does not know (not a name of real Ray)
are reported and left alone.
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MATRIX_DIR = os.path.join(HERE, "..", "src", "ray_adapter", "compat_matrix")
HEADER = re.compile(r'^\[symbols\.("?)([^"\]]+)\1\]\s*$')
API_LINE = re.compile(r'^api\s*=')


def module_files():
    for filename in sorted(os.listdir(MATRIX_DIR)):
        if filename.startswith("ray") and filename.endswith(".toml"):
            yield filename[:-len(".toml")], os.path.join(MATRIX_DIR, filename)


def rewrite(path, levels):
    """Set the api line of each symbol table of ``path``; returns names ``levels`` lacks."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    out, unknown, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        match = HEADER.match(line)
        if not match:
            continue
        name = match.group(2)
        if i < len(lines) and API_LINE.match(lines[i]):
            i += 1  # replaced below
        if name in levels:
            out.append(f'api = "{levels[name]}"')
        else:
            unknown.append(name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out))
    return unknown


def main(ray_python):
    files = dict(module_files())
    proc = subprocess.run([ray_python, os.path.join(HERE, "ray_api_levels.py"), *files],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_BACKEND": ""})
    levels = json.loads(proc.stdout)
    for module, path in files.items():
        unknown = rewrite(path, levels.get(module, {}))
        if unknown:
            print(f"{module}: not names of real Ray, left alone: {', '.join(unknown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rayref/bin/python"))
