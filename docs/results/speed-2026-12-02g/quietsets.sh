#!/bin/bash
# cpu.py sets of 4 rounds, each started only when the 1-min load is below 1.0, until $1 (HHMM UTC)
cd /tmp/hfc
while [ $(date -u +%H%M) -lt $1 ]; do
  l=$(cut -d' ' -f1 /proc/loadavg)
  if awk "BEGIN{exit !($l < 1.0)}"; then
    T=$(date -u +%H%M%S)
    /work/main/.venv/bin/python /tmp/hfd/cpu.py 4 hf,eager before=/tmp/hfd/base after=/tmp/hfd/snap5 > /tmp/hfd/qset-$T.txt 2>&1
  else
    sleep 10
  fi
done
