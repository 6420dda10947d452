#!/usr/bin/env bash
# Executes the teaching notebooks in the real GoNB kernel and checks them.
#
#   bash docs/notebooks/run.sh [--update] [NOTEBOOK.ipynb...]
#
# Builds GoNB and goimports from the tools module (docs/notebooks/tools),
# registers the GoNB kernel in a private Jupyter data directory, executes
# every notebook (or the ones named) with jupyter nbconvert, and fails when
#   - a cell fails: a compile error, or anything written to stderr (a failed
#     assertion panics; GoNB v0.11.1 reports that only on stderr), or
#   - a committed notebook's outputs differ from the fresh execution, by the
#     rule in nbcheck.py (durations and GoNB's temporary directory excepted).
# With --update it instead writes the fresh outputs into the committed
# notebooks (after checking that no cell failed): run it after editing one.
#
# Needs Go and Debian's jupyter-nbconvert, jupyter-client, python3-nbclient
# and python3-nbformat (.ci/run installs them). The tools are built once per
# tools go.sum and Go version under $MODREF_NOTEBOOK_CACHE (default
# ~/.cache/modref-notebooks); Go's build cache makes a rebuild quick.
set -euo pipefail
# Notebooks named on the command line are relative to where it was called.
args=()
for a in "$@"; do
  case "$a" in
    --update) args+=("$a") ;;
    *) args+=("$(cd "$(dirname "$a")" && pwd)/$(basename "$a")") ;;
  esac
done
set -- ${args[@]+"${args[@]}"}
cd "$(dirname "$0")"
dir=$(pwd)

update=false
if [ "${1:-}" = "--update" ]; then
  update=true
  shift
fi
if [ $# -eq 0 ]; then
  set -- "$dir"/[0-9]*.ipynb
fi

cache=${MODREF_NOTEBOOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modref-notebooks}
key=$( (cat tools/go.sum; go version) | sha256sum | cut -c1-16)
bin=$cache/bin-$key
if [ ! -x "$bin/gonb" ] || [ ! -x "$bin/goimports" ]; then
  mkdir -p "$bin"
  (cd tools && CGO_ENABLED=0 go build -o "$bin/gonb" github.com/janpfeifer/gonb &&
    CGO_ENABLED=0 go build -o "$bin/goimports" golang.org/x/tools/cmd/goimports)
fi
export PATH=$bin:$PATH
export JUPYTER_DATA_DIR=$cache/jupyter
# gopls only serves completion in an editor: --force_deps installs without it.
# --raw_error makes a compile error plain text in the log.
gonb --install --force_deps --raw_error >/dev/null 2>&1 ||
  { echo "gonb --install failed:"; gonb --install --force_deps --raw_error; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for nb in "$@"; do
  nb=$(cd "$(dirname "$nb")" && pwd)/$(basename "$nb")
  name=$(basename "$nb")
  start=$SECONDS
  # The kernel starts in the notebook's directory, from which the notebook's
  # first cell finds the checkout (../..).
  if ! jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=900 --ExecutePreprocessor.record_timing=False \
    --output-dir "$work" --output "$name" "$nb" >"$work/$name.log" 2>&1; then
    echo "$name: execution failed ($((SECONDS - start)) s):"
    if grep -q CellExecutionError "$work/$name.log"; then
      sed -n '/^nbclient.exceptions.CellExecutionError/,$p' "$work/$name.log" | grep -v -E '^[IWE][0-9]{4} '
    else
      grep -v -E '^[IW][0-9]{4} ' "$work/$name.log" | tail -n 40
    fi
    failed=1
    continue
  fi
  if $update; then
    if /usr/bin/python3 "$dir/nbcheck.py" "$work/$name"; then
      cp "$work/$name" "$nb"
      echo "$name: executed in $((SECONDS - start)) s, outputs updated"
    else
      failed=1
    fi
  elif /usr/bin/python3 "$dir/nbcheck.py" "$nb" "$work/$name"; then
    echo "$name: executed in $((SECONDS - start)) s, outputs as committed"
  else
    echo "$name: executed in $((SECONDS - start)) s, see the problems above"
    failed=1
  fi
done
exit $failed
