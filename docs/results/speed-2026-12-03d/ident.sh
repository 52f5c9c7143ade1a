#!/bin/bash
# usage: ident.sh SRC OUTDIR -- `perfdoctor analyze TRACE --json m.json` (COLUMNS=120, one output path) on every
# Kineto trace: tests/fixtures and tests/fixtures/wild (*.kineto.json*), ../shared/traces (recursive *.json,
# *.json.gz, and the 8-rank DLRM folder), both 80 MB shapes; stdout + exit code, stderr and the JSON into OUTDIR
SRC=$1; OUT=$2
PY=/work/main/.venv/bin/python
export COLUMNS=120 PYTHONPATH=$SRC
rm -rf $OUT; mkdir -p $OUT /tmp/idrun_$$
TR=$( (ls /work/main/tests/fixtures/*.kineto.json* /work/main/tests/fixtures/wild/*.kineto.json*;
       find /work/shared/traces -type f \( -name '*.json' -o -name '*.json.gz' \);
       echo /work/shared/traces/wild/param_dlrm_8ranks; echo /tmp/hf80w/hf-80/trace.json; echo /tmp/hf80w/eager-80/trace.json) | sort -u)
mkdir -p /tmp/idrun_$$; cd /tmp/idrun_$$
for t in $TR; do
  n=$(echo $t | tr / _)
  rm -f m.json
  timeout 600 $PY -m perfdoctor analyze $t --json m.json >$OUT/$n.out 2>$OUT/$n.err; echo "rc=$?" >>$OUT/$n.out
  [ -f m.json ] && mv m.json $OUT/$n.json
done
ls $OUT/*.out | wc -l
