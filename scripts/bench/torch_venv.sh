# Sourced by the bench export scripts: sets `venv` to the fixtures' pinned torch venv
# (.venv-fixtures/main, or FIXTURES_MAIN_VENV) and exits with a hint when it is missing or its
# requirements stamp is stale. The fixture script (scripts/fixtures/make_fixtures.sh) owns
# creating it. Needs `root` and `who` (the caller's name for messages).
venv="${FIXTURES_MAIN_VENV:-$root/.venv-fixtures/main}"
req="$root/scripts/fixtures/requirements.txt"
stamp="$venv/.requirements.sha256"
if ! { [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(sha256sum "$req" | cut -d' ' -f1)" ]; }; then
  echo "$who: no up-to-date torch venv at $venv; create it with" >&2
  echo "  bash scripts/fixtures/make_fixtures.sh std   (or set FIXTURES_MAIN_VENV to a venv with $req)" >&2
  exit 1
fi
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" PYTHONWARNINGS=ignore
