#!/bin/bash
# The training package installed as pip installs it, run by its console script: each task
# gets a venv-like prefix (per task: the tasks of a node would race on one), the package's
# directory linked into its site-packages (a link, so that the tests find the repo's source
# lines; Python keeps the path it imported through, as with a copy), and pip's console-script
# stub in its bin/. Called as `run_installed.sh PYTHON -u PACKAGE/cli.py`. With
# SLURMDIAG_INSTALLED_ENTRY=script a thin train.py of the job's own runs it instead.
set -eu
python="$1"
package_dir="$(dirname "$3")"
package="$(basename "$package_dir")"
prefix="${SLURMDIAG_SCENARIO_DIR:-/tmp}/venv-${SLURM_PROCID:-0}"
version="$("$python" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')"
site="$prefix/lib/$version/site-packages"
mkdir -p "$site" "$prefix/bin"
ln -sfn "$package_dir" "$site/$package"
script="$prefix/bin/$package-train"
cat > "$script" <<STUB
#!$python
# -*- coding: utf-8 -*-
import re
import sys
from $package.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\.pyw|\.exe)?\$', '', sys.argv[0])
    sys.exit(main())
STUB
chmod +x "$script"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
if [ "${SLURMDIAG_INSTALLED_ENTRY:-}" = script ]; then  # run_installed_script.sh
    script="$prefix/train.py"
    printf 'from %s.cli import main\n\nif __name__ == "__main__":\n    raise SystemExit(main())\n' \
        "$package" > "$script"
fi
exec "$python" -u "$script"
