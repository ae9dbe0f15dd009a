#!/bin/bash
# Convert each dcm2niix QA corpus with two checkouts' code (BASE_VENV and MINE_VENV: each a venv with that
# checkout installed, `make install`), from one delivery.toml written by BASE's `labzarr init`, and compare
# manifest.csv and every store file byte for byte (bench/compare/same_store.py); run wall times are printed, not compared.
# usage: bench/compare/compare_stores.sh BASE_VENV MINE_VENV CORPORA_DIR OUT_DIR [corpus...]  (CORPORA_DIR/<name>/In/...)
set -u
BASE=$1; MINE=$2; CORP=$3; OUT=$4; shift 4
names=${@:-dcm_qa_enh dcm_qa_nih dcm_qa dcm_qa_philips dcm_qa_ge}
for c in $names; do
  for side in base mine; do rm -rf $OUT/$c/$side; mkdir -p $OUT/$c/$side; done
  (cd $OUT/$c/base && $BASE/bin/labzarr init $c --raw $CORP/$c --root . > init.log 2>&1)
  mkdir -p $OUT/$c/mine/manifests/$c && cp $OUT/$c/base/manifests/$c/delivery.toml $OUT/$c/mine/manifests/$c/
  for side in base mine; do
    v=$BASE; [ $side = mine ] && v=$MINE
    (cd $OUT/$c/$side && /usr/bin/time -f "%e s" $v/bin/labzarr convert manifests/$c/delivery.toml --workers 2 > convert.log 2>&1; echo "rc $?" >> convert.log)
  done
  b=$OUT/$c/base; m=$OUT/$c/mine
  man=$(cmp -s $b/manifests/$c/manifest.csv $m/manifests/$c/manifest.csv && echo same || echo DIFFERENT)
  store=$(python3 "$(dirname "$0")/same_store.py" $b/data/stores $m/data/stores)
  nfiles=$(find $b/data/stores -type f | wc -l)
  rows=$(($(wc -l < $b/manifests/$c/manifest.csv) - 1))
  echo "$c: manifest ($rows rows) $man; store ($nfiles files) $store; base $(grep '^rc' $b/convert.log) $(grep ' s$' $b/convert.log | tail -1), mine $(grep '^rc' $m/convert.log) $(grep ' s$' $m/convert.log | tail -1)"
done
