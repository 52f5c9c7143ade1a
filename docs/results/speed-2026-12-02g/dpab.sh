#!/bin/bash
R=$1; S=$2; shift 2
for i in $(seq $R); do for t in "$@"; do echo -n "$t $S: "; PYTHONPATH=$t /work/main/.venv/bin/python /tmp/hfd/dphase.py /tmp/hf80w/$S-80/trace.json 7; done; done
uptime
