greet() { echo "Hello $1"; }
shout() { echo "$1" | tr a-z A-Z; }
