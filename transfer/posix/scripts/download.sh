# download.sh TAG DIR NAME...: in DIR, checks that every NAME exists,
# reports how many entries they hold ("TAG count N"), prints the stream
# marker "TAG stream" on stdout and runs `tar -c` over the NAMEs; its status
# is reported as "TAG tar S" and is the script's. A refusal is
# "TAG fail REASON WHICH" (WHICH: "dir" or the index of a NAME) with exit
# status 3.
tag=$1;
dir=$2;
shift 2;
say() { printf '%s %s\n' "$tag" "$*" >&2; };
sum() { s=0; while read -r k; do s=$((s+k)); done; echo "$s"; };
if [ ! -e "$dir" ]; then say fail missing dir; exit 3; fi;
if [ ! -d "$dir" ]; then say fail notdir dir; exit 3; fi;
cd "$dir" || { say fail cd dir; exit 3; };
i=0;
for n do
	if [ ! -e "$n" ] && [ ! -L "$n" ]; then say fail missing "$i"; exit 3; fi;
	i=$((i+1));
done;
# count NAME...: entries below and including each NAME, as tar will archive
# them, less the entry of a NAME "." (a root, as transfer.Stats leaves it
# out). Names go to find as ./NAME, so that none is taken for an option.
count() {
	i=$#;
	while [ "$i" -gt 0 ]; do set -- "$@" "./$1"; shift; i=$((i-1)); done;
	find "$@" ! -name . -exec sh -c 'echo $#' sh {} + | sum;
};
say count "$(count "$@")";
# GNU tar's default format keeps whole seconds; its PAX format keeps the
# nanoseconds the host's extractor restores. busybox has only one format.
fmt=;
case "$(tar --version 2>/dev/null)" in *"GNU tar"*) fmt=--format=posix;; esac;
printf '%s stream\n' "$tag";
tar -c $fmt -f - -- "$@";
st=$?;
say tar "$st";
exit "$st";
