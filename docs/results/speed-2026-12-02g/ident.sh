#!/bin/bash
# usage: ident.sh SRC OUTDIR -- perfdoctor analyze TRACE --json on every trace, outputs into OUTDIR
SRC=$1; OUT=$2
PY=/work/main/.venv/bin/python
export COLUMNS=120 PYTHONPATH=$SRC
rm -rf $OUT; mkdir -p $OUT
TR=$( (ls /work/main/tests/fixtures/*.kineto.json* /work/main/tests/fixtures/wild/*.kineto.json*; find /work/shared/traces -type f ! -name README.md; echo /work/shared/traces/wild/param_dlrm_8ranks; echo /tmp/hf80w/hf-80/trace.json; echo /tmp/hf80w/eager-80/trace.json) | sort)
cd /tmp/hfc
for t in $TR; do
  n=$(echo $t | tr / _)
  rm -f /tmp/hfc/m.json
  timeout 600 $PY -m perfdoctor analyze $t --json /tmp/hfc/m.json >$OUT/$n.out 2>$OUT/$n.err; echo "rc=$?" >>$OUT/$n.out
  [ -f /tmp/hfc/m.json ] && mv /tmp/hfc/m.json $OUT/$n.json
done
# no path rewriting: both trees read the same traces
ls $OUT/*.out | wc -l
