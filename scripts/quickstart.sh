#!/usr/bin/env bash
# Open the quick-start notebook in JupyterLab: `bash scripts/quickstart.sh [extra jupyter args]`.
#
# Creates .venv when missing and installs exactly what Binder installs (binder/requirements.txt:
# this package, editable, plus JupyterLab), then starts JupyterLab on 127.0.0.1 with
# notebooks/01-quickstart.ipynb open. Re-running skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_setup.sh
source scripts/_setup.sh

ensure_venv
# pip resolves `-e .` in the requirements file against the working directory (the repo root),
# exactly as repo2docker does on Binder.
mapfile -t labext_inputs < <(labextension_inputs)
ensure_pip_install quickstart pyproject.toml binder/requirements.txt "${labext_inputs[@]}" \
    -- -r binder/requirements.txt

notebook="${AGENTLOOP_NOTEBOOK:-notebooks/01-quickstart.ipynb}"
if [[ ! -f "$notebook" ]]; then
    _warn "$notebook does not exist."
    exit 1
fi
mapfile -t root_flags < <(lab_root_flags)
# Serve the repository root (not just notebooks/) and land on the notebook, the same URL a
# Binder link with urlpath=lab/tree/notebooks/01-quickstart.ipynb opens.
exec "$VENV/bin/jupyter" lab --ip 127.0.0.1 --ServerApp.root_dir="$PWD" \
    --LabApp.default_url="/lab/tree/$notebook" "${root_flags[@]}" "$@"
