# upload.sh TAG PLACE DEST PARENT TMP WANT: extracts the tar stream on stdin
# into TMP/r (TMP a fresh directory the caller named) and moves it into
# place: PLACE "new" renames TMP/r to DEST, which must not exist; "into"
# merges the entries of TMP/r into the directory DEST; "as" renames the one
# entry TMP/r must hold to DEST, which must not exist or (for a
# non-directory entry) be a file or symlink, replaced. WANT, unless
# negative, is the number of entries TMP/r must hold. Success is
# "TAG ok N" on stderr; a refusal is "TAG fail REASON STATUS [DETAIL]" with
# exit status 3. TMP is removed on every way out the shell sees; it holds
# the script's pid in TMP/pid, so that a cleanup after a kill can wait for
# the script to be gone, and so that the next upload into PARENT removes it
# (its owner dead) if nothing else did: that sweep reports "TAG swept N".
# TMP is made as TMP.PID and renamed once TMP.PID/pid is written: at no
# point does a kill leave a temp dir that does not say whose it is. Once
# the pid is written the script says "TAG started": a cleanup after it
# need not wait for a script that may not have begun.
tag=$1 place=$2 dest=$3 parent=$4 tmp=$5 want=$6;
made=;
say() { printf '%s %s\n' "$tag" "$*" >&2; };
pre=$tmp.$$;
cleanup() { if [ -n "$made" ]; then chmod -R u+rwx -- "$pre" "$tmp" 2>/dev/null; rm -rf -- "$pre" "$tmp"; fi; };
fail() { cleanup; say fail "$@"; exit 3; };
trap 'cleanup; exit 129' HUP;
trap 'cleanup; exit 130' INT;
trap 'cleanup; exit 141' PIPE;
trap 'cleanup; exit 143' TERM;
exists() { [ -e "$1" ] || [ -L "$1" ]; };
isdir() { [ -d "$1" ] && [ ! -L "$1" ]; };
sum() { s=0; while read -r k; do s=$((s+k)); done; echo "$s"; };
# check SRC DST REL: every entry of SRC can take its place in DST: a
# directory meets a directory (and is checked inside) or nothing; a
# non-directory meets anything but a directory. The first clash is
# reported as "conflict". A subshell body keeps each call's variables.
check() (
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		exists "$e" || continue;
		n=${e##*/};
		d=$2/$n;
		if isdir "$e"; then
			if isdir "$d"; then
				check "$e" "$d" "$3$n/" || exit 1;
			elif exists "$d"; then
				say fail conflict 0 "$3$n";
				exit 1;
			fi;
		elif isdir "$d"; then
			say fail conflict 0 "$3$n";
			exit 1;
		fi;
	done;
);
# mode DIR: prints DIR's permission bits as a chmod mode ("u=rwx,g=rx,o="),
# read from ls -ld, the one portable way; setuid, setgid and sticky drop.
mode() {
	m=$(ls -ld -- "$1") || return 1;
	m=${m#?};
	r=;
	for w in u g o; do
		t=${m%"${m#???}"};
		m=${m#???};
		b=;
		case $t in r??) b=r;; esac;
		case $t in ?w?) b=${b}w;; esac;
		case $t in ??[xst]) b=${b}x;; esac;
		r=$r${r:+,}$w=$b;
	done;
	echo "$r";
};
# merge SRC DST DEPTH: moves the entries of SRC into DST; directories that
# meet merge, and then take the mode and mtime the archive gave them (the
# mtime kept in a stamp file per depth, as emptying a directory changes
# it); anything else replaces what is there. A symlink in DST is removed
# first: mv would follow one that points to a directory.
merge() (
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		exists "$e" || continue;
		d=$2/${e##*/};
		if isdir "$e" && isdir "$d"; then
			m=$(mode "$e") || exit 1;
			touch -r "$e" "$tmp/stamp$3" || exit 1;
			merge "$e" "$d" $(($3+1)) || exit 1;
			chmod "$m" "$d" || exit 1;
			touch -r "$tmp/stamp$3" "$d" || exit 1;
		else
			if [ -L "$d" ]; then rm -f -- "$d" || exit 1; fi;
			mv -f -- "$e" "$d" || exit 1;
		fi;
	done;
);
case $place in
new) if exists "$dest"; then fail exists 0; fi;
	mkdir -p -- "$parent" || fail mkdir "$?";
	;;
into) exists "$dest" || fail missing 0;
	[ -d "$dest" ] || fail notdir 0;
	;;
as) if isdir "$dest"; then fail exists 0; fi;
	mkdir -p -- "$parent" || fail mkdir "$?";
	;;
*) fail usage 0;
	;;
esac;
# The sweep: a temp dir of an earlier upload into PARENT goes when its
# script is gone: the pid in it (or, before its rename, in its name) not
# alive (see alive). A
# dir without either (made by an older ferry) goes once unchanged for 5
# minutes (a find without -mmin keeps it). Only real directories of this
# user's named as Upload names them (hex digits, and .PID) are looked at;
# a pid reused since only keeps a dead one a while longer.
# alive PID: the process exists (also another user's, as /proc shows it)
# and is no zombie (killed, waiting to be reaped).
alive() {
	s=;
	if [ -r "/proc/$1/stat" ]; then
		read -r s < "/proc/$1/stat";
		case ${s##*") "} in Z*|X*) return 1;; esac;
	fi;
	kill -0 "$1" 2>/dev/null || [ -d "/proc/$1" ];
};
swept=0;
for old in "$parent"/.ferry-up-*; do
	pid=;
	case ${old##*/} in
	.ferry-up-|.ferry-up-.*|.ferry-up-*[!0-9a-f.]*|.ferry-up-*.*.*|.ferry-up-*.) continue;;
	.ferry-up-*.*) pid=${old##*.};;
	esac;
	case $pid in *[!0-9]*) continue;; esac;
	if [ -L "$old" ] || [ ! -d "$old" ] || [ ! -O "$old" ]; then continue; fi;
	if [ -z "$pid" ] && [ -f "$old/pid" ] && [ ! -L "$old/pid" ]; then
		read -r pid < "$old/pid";
		case $pid in ''|*[!0-9]*) continue;; esac;
	fi;
	if [ -n "$pid" ]; then
		if alive "$pid"; then continue; fi;
	elif [ -e "$old/pid" ] || [ -L "$old/pid" ] || [ -z "$(find "$old" -prune -mmin +5 2>/dev/null)" ]; then
		continue;
	fi;
	# The pid is sh's: its tar, killed with it, may still be finishing a
	# write, which makes one rm fail.
	i=0;
	while [ -e "$old" ] && [ "$i" -lt 3 ]; do
		chmod -R u+rwx -- "$old" 2>/dev/null;
		rm -rf -- "$old" 2>/dev/null || sleep 0.1 2>/dev/null || sleep 1;
		i=$((i+1));
	done;
	if [ ! -e "$old" ]; then swept=$((swept+1)); fi;
done;
if [ "$swept" -gt 0 ]; then say swept "$swept"; fi;
if exists "$tmp"; then fail tmp 1; fi;
mkdir -m 700 -- "$pre" || fail tmp "$?";
made=1;
echo "$$" > "$pre/pid" || fail tmp "$?";
say started;
mv -- "$pre" "$tmp" || fail tmp "$?";
mkdir -- "$tmp/r" || fail tmp "$?";
tar -x -p -o -f - -C "$tmp/r" || fail tar "$?";
n=$(find "$tmp/r" -mindepth 1 -exec sh -c 'echo $#' sh {} + | sum);
case $n in ''|*[!0-9]*) fail count 0 "?";; esac;
if [ "$want" -ge 0 ] && [ "$n" -ne "$want" ]; then fail count 0 "$n"; fi;
case $place in
new) if exists "$dest"; then fail exists 0; fi;
	mv -- "$tmp/r" "$dest" || fail move "$?";
	;;
into) check "$tmp/r" "$dest" "" || { cleanup; exit 3; };
	merge "$tmp/r" "$dest" 0 || fail move 1;
	;;
as) k=0;
	for e in "$tmp/r"/* "$tmp/r"/.[!.]* "$tmp/r"/..?*; do
		if exists "$e"; then one=$e; k=$((k+1)); fi;
	done;
	[ "$k" -eq 1 ] || fail single 0 "$k";
	if isdir "$one"; then
		if exists "$dest"; then fail exists 0; fi;
	elif isdir "$dest"; then
		fail exists 0;
	elif [ -L "$dest" ]; then
		rm -f -- "$dest" || fail move "$?";
	fi;
	mv -f -- "$one" "$dest" || fail move "$?";
	;;
esac;
cleanup;
say ok "$n";
