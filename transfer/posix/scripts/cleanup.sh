# cleanup.sh TMP [started]: removes an upload's temp dir after its own
# script could not (a kill, a cut relay), under its name TMP or, if that
# script did not get to rename it, TMP.PID. The script may still be
# starting or dying: while the pid in TMP/pid or in the name TMP.PID is a
# live process, wait for it (up to 5s); with neither yet, give the script
# half a second to show up, unless the host heard it say it had written
# its pid ("started"): then neither means it removed its dir itself.
# Removal that races a dying tar's last writes is tried again.
# gone PID: no such process, or a zombie (killed, waiting to be reaped).
gone() {
	if ! kill -0 "$1" 2>/dev/null; then return 0; fi;
	s=;
	if [ -r "/proc/$1/stat" ]; then read -r s < "/proc/$1/stat"; fi;
	case ${s##*") "} in Z*|X*) return 0;; esac;
	return 1;
};
i=0;
while [ "$i" -lt 50 ]; do
	pid=;
	if [ -f "$1/pid" ]; then
		read -r pid < "$1/pid";
	else
		for p in "$1".*; do
			case ${p##*.} in ''|*[!0-9]*) ;; *) pid=${p##*.};; esac;
		done;
	fi;
	if [ -n "$pid" ]; then
		if gone "$pid"; then break; fi;
	elif [ "$i" -ge 5 ] || [ "$2" = started ]; then
		break;
	fi;
	sleep 0.1 2>/dev/null || sleep 1;
	i=$((i+1));
done;
for d in "$1" "$1".*; do
	case ${d#"$1"} in .|.*[!0-9]*) continue;; esac;
	i=0;
	while [ -e "$d" ] || [ -L "$d" ]; do
		[ "$i" -lt 10 ] || exit 1;
		chmod -R u+rwx -- "$d" 2>/dev/null;
		rm -rf -- "$d" 2>/dev/null || sleep 1;
		i=$((i+1));
	done;
done;
