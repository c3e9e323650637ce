max() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
