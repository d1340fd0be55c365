# stat.sh TAG FOLLOW PATH: reports the kind of PATH as "TAG kind K" on
# stderr. With FOLLOW=1 a symlink is reported as what it points to, and a
# dangling one as a symlink.
#
# Scripts travel as one argv word, which may not hold a newline: lines are
# joined with spaces, so every line ends in ";" or a word that continues
# (then, do, else, {, (, |, &&, ||, in).
p=$3;
if [ "$2" != 1 ] && [ -L "$p" ]; then k=symlink;
elif [ -d "$p" ]; then k=dir;
elif [ -f "$p" ]; then k=file;
elif [ -e "$p" ]; then k=other;
elif [ -L "$p" ]; then k=symlink;
else k=missing;
fi;
printf '%s kind %s\n' "$1" "$k" >&2;
