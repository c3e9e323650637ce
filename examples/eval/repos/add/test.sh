. ./lib.sh
fail=0
[ "$(add 2 3)" = 5 ] || { echo "FAIL add 2 3: got $(add 2 3)"; fail=1; }
[ "$(double 4)" = 8 ] || { echo "FAIL double 4: got $(double 4)"; fail=1; }
[ $fail = 0 ] && echo PASS
exit $fail
