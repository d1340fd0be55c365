# cleanup.sh TMP: removes an upload's temp dir after its own script could
# not (a kill, a cut relay). That script may still be starting or dying:
# while TMP/pid names a live process, wait for it (up to 5s); with no pid
# file yet, give the script half a second to show up. Removal that races
# a dying tar's last writes is tried again.
i=0;
while [ "$i" -lt 50 ]; do
	if [ -f "$1/pid" ]; then
		pid=;
		read -r pid < "$1/pid";
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then break; fi;
	elif [ "$i" -ge 5 ]; then
		break;
	fi;
	sleep 0.1 2>/dev/null || sleep 1;
	i=$((i+1));
done;
i=0;
while [ -e "$1" ] || [ -L "$1" ]; do
	[ "$i" -lt 10 ] || exit 1;
	chmod -R u+rwx -- "$1" 2>/dev/null;
	rm -rf -- "$1" 2>/dev/null || sleep 1;
	i=$((i+1));
done;
