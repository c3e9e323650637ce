. ./lib.sh
fail=0
[ "$(greet Ada)" = "Hello, Ada!" ] || { echo "FAIL greet Ada: got $(greet Ada)"; fail=1; }
[ "$(shout hi)" = HI ] || { echo "FAIL shout hi: got $(shout hi)"; fail=1; }
[ $fail = 0 ] && echo PASS
exit $fail
