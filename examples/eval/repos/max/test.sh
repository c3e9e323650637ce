. ./lib.sh
fail=0
[ "$(max 2 7)" = 7 ] || { echo "FAIL max 2 7: got $(max 2 7)"; fail=1; }
[ "$(min 2 7)" = 2 ] || { echo "FAIL min 2 7: got $(min 2 7)"; fail=1; }
[ $fail = 0 ] && echo PASS
exit $fail
