# Entry points for a fresh Debian machine, run as root:
#   make test   set everything up (apt packages, .venv, local Slurm cluster) and run the whole suite
#   make demo   set everything up, start a hanging job, run `slurmdiag attach` on it
#   make accuracy  run every scenario job, attach, compare with its truth: docs/accuracy.md
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
APT_PACKAGES := slurmctld slurmd slurm-client munge strace chromium openssh-server iproute2 procps \
                zsh bash-completion mariadb-server slurmdbd gdb
CLUSTER := deploy/local-cluster/cluster
NODES ?= 4

.PHONY: setup apt venv cluster test unit fuzz demo accuracy bench lint clean

setup: apt venv

apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch pinned: this CPU build is available offline; an unpinned torch pulls a CUDA build.
	$(VENV)/bin/pip install -q 'torch==2.13.0'
	$(VENV)/bin/pip install -q -e '.[test,ssh,torch,dev,postmortem]'
	touch $@

venv: $(VENV)/.installed

cluster: setup
	$(CLUSTER) up --nodes $(NODES)

test: setup cluster lint
	$(VENV)/bin/python -m pytest -q --durations=25

unit: venv
	$(VENV)/bin/python -m pytest -q -m "not cluster and not browser and not ssh"

# Long fuzzing of every parser and decoder (the suite runs 25 deterministic examples each);
# FUZZ_EXAMPLES per decoder, random seeds: a failure prints the input that reproduces it.
FUZZ_EXAMPLES ?= 5000
fuzz: venv
	HYPOTHESIS_PROFILE=long FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/python -m pytest -q \
	  -p no:cacheprovider tests/unit/test_fuzz_decoders.py --hypothesis-show-statistics

demo: setup cluster
	$(VENV)/bin/python deploy/demo.py

accuracy: setup cluster
	# every scenario on the local cluster, in batches of at most 20 ranks (~15 min on 2 cores)
	if [ -z "$${SLURM_CONF:-}" ]; then eval "$$($(CLUSTER) env)"; fi; \
	$(VENV)/bin/python tests/accuracy.py --out docs/accuracy.md

bench: setup
	# bench_attach.py starts its own cluster (6917/18001-; with --netns one with a network
	# namespace a node, 6947/18401); the test cluster is left alone.
	# Every run below runs to its end; make fails afterwards if any was over budget.
	status=0; \
	$(VENV)/bin/python bench/bench_attach.py --job torch --keep-cluster || status=1; \
	$(VENV)/bin/python bench/bench_attach.py --job torch --netns || status=1; \
	$(VENV)/bin/python bench/bench_attach.py --keep-cluster || status=1; \
	$(VENV)/bin/python bench/bench_attach.py --nodes 8 --ranks-per-node 8 --keep-cluster || status=1; \
	$(VENV)/bin/python bench/bench_attach.py --scaling 8,32,128 || status=1; \
	$(VENV)/bin/python bench/bench_analysis.py || status=1; \
	$(VENV)/bin/python bench/bench_report.py || status=1; \
	exit $$status

lint: venv
	$(VENV)/bin/ruff check slurmdiag tests bench
	$(VENV)/bin/mypy slurmdiag

clean:
	$(CLUSTER) down || true
	rm -rf $(VENV) build *.egg-info artifacts
