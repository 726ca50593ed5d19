#!/usr/bin/env bash
# magis-ray as an ordinary user with no cgroup delegated (what HPC and CI users have): the sandbox in
# its user-namespace mode, its memory budget held by the watchdog. Run as root (CI is): it makes the
# user when missing, gives it a copy of this tree, and as that user installs magis-ray[grade] in a
# venv the user owns, then
#   1. grades the tests' calc fixture instance with its gold patch (resolved) and with none (not),
#   2. runs the calc example's scripted `submit --tests on` and checks its log (check_submit.py),
#   3. grades a prediction whose test run outgrows its memory budget (a file in /tmp, which is in
#      memory here, and the process's own pages): it is stopped and reported so.
# Prints one line per part with its time; skips, saying why, without bubblewrap or unprivileged user
# namespaces. The venv is kept in the user's home while pyproject.toml is unchanged (magis-ray itself
# is installed again every time); pip's cache is the user's own (pip refuses one it does not own).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
user=${MAGIS_CI_USER:-magis-ci}
skip() { echo "rootless: skipped ($1)"; exit 0; }
[ "$(id -u)" = 0 ] || skip "it runs as root, to make the ordinary user it runs as"
command -v bwrap >/dev/null || skip "bubblewrap is not installed"
command -v runuser >/dev/null || skip "runuser (util-linux) is missing"
if ! id "$user" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$user" || skip "useradd could not make the user $user"
fi
home=$(getent passwd "$user" | cut -d: -f6)
# The machine's pip settings (its index, mirrors, certificates) as root has them, for the user's pip.
pip_env=()
while IFS='=' read -r key value; do
    pip_env+=("PIP_$(echo "$key" | tr 'a-z-' 'A-Z_')=$value")
done < <(python3 -m pip config list 2>/dev/null | sed -n "s/^[a-z:]*\.\([a-z-]*\)='\(.*\)'$/\1=\2/p" | sort -u -t= -k1,1)
as_user() {
    runuser -u "$user" -- env -i -C "$home" HOME="$home" USER="$user" LOGNAME="$user" PATH=/usr/local/bin:/usr/bin:/bin \
        LANG=C.UTF-8 MAGIS_LOG_LEVEL=warning "${pip_env[@]}" "$@"
}
as_user bwrap --unshare-user --disable-userns --ro-bind / / true 2>/dev/null ||
    skip "bubblewrap cannot make an unprivileged user namespace here as $user"
as_user python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    skip "the user's python3 is older than 3.10 (or missing)"
if ! as_user python3 -c 'import ensurepip' 2>/dev/null && command -v apt-get >/dev/null; then
    apt-get install -y -qq python3-venv >/dev/null
fi

work=$(as_user mktemp -d "$home/rootless.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar --exclude=./.venv --exclude=./.git --exclude=__pycache__ --exclude='*.egg-info' --exclude=./build -cf - . |
    as_user tar -xf - -C "$work" --one-top-level=src

start=$(date +%s)
venv="$home/venv-$(sha256sum pyproject.toml | cut -c1-12)"
how="reused (pyproject.toml unchanged)"
if [ ! -x "$venv/bin/magis-ray" ]; then
    how="new"
    for old in "$home"/venv-*; do [ -d "$old" ] && rm -rf "$old"; done
    as_user python3 -m venv "$venv"
fi
as_user "$venv/bin/python" -m pip install --quiet "$work/src[grade]" >"$work/pip.txt" 2>&1 ||
    { grep -v "is ignored: it is neither a file" "$work/pip.txt" >&2; exit 1; }
as_user "$venv/bin/magis-ray" --help >/dev/null
now=$(date +%s)
echo "rootless: as $user (uid $(id -u "$user")), venv $how: pip install .[grade] took $((now - start)) s"

# 1. A grading of the fixture instance: its gold patch resolves it, no patch does not.
start=$now
as_user "$venv/bin/python" "$work/src/.ci/rootless_grading.py" fixture "$work/src" "$work"
grade() {
    as_user "$venv/bin/magis-ray" grade "$@" --dataset "$work/calc.jsonl" --repos-dir "$work/repos" --store "$work/store" \
        --env-cache "$work/envs" --test-cmd "pytest -rA" --timeout 300 >"$work/grade.txt" 2>&1 ||
        { cat "$work/grade.txt" >&2; exit 1; }
}
grade --gold --memory 1G
gold=$(as_user "$venv/bin/python" "$work/src/.ci/rootless_grading.py" check "$work/store" gold@calc resolved)
grade --empty --memory 1G
empty=$(as_user "$venv/bin/python" "$work/src/.ci/rootless_grading.py" check "$work/store" empty@calc unresolved)
now=$(date +%s)
echo "rootless: grade of a fixture instance took $((now - start)) s: $gold; $empty"

# 2. The calc example's scripted submit with tests on.
start=$now
as_user "$venv/bin/python" "$work/src/examples/calc/make_repo.py" "$work/calc" >/dev/null
as_user bash -c 'cd "$1" && "$2/bin/magis-ray" submit "$3/examples/calc/issue.json" --repo . --store "$4" \
    --llm "scripted:$3/examples/calc/script.json" --tests on >"$5/summary.txt" 2>"$5/terminal.txt"' \
    submit "$work/calc" "$venv" "$work/src" "$work/submit-store" "$work" ||
    { cat "$work/terminal.txt" "$work/summary.txt" >&2; exit 1; }
run=$(sed -n 's/^run: *//p' "$work/summary.txt")
as_user "$venv/bin/magis-ray" events "$run" --store "$work/submit-store" >"$work/events.jsonl"
checked=$(as_user "$venv/bin/python" "$work/src/.ci/check_submit.py" "submit" "$work/events.jsonl" "$work/terminal.txt")
now=$(date +%s)
echo "rootless: scripted submit --tests on took $((now - start)) s: $checked"

# 3. A test run over its memory budget is stopped and reported so.
start=$now
grade "$work/ballast.jsonl" --memory 512M
memory=$(as_user "$venv/bin/python" "$work/src/.ci/rootless_grading.py" check "$work/store" ballast@calc memory)
now=$(date +%s)
echo "rootless: memory limit took $((now - start)) s: $memory"
