add() { echo $(( $1 - $2 )); }
double() { echo $(( $1 * 2 )); }
