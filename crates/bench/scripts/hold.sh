# Sourced by the measurement scripts: TASKS sleeping processes for the length of the script.
#
# `hold BENCH TASKS [THREADS]` starts `taskdiag-bench hold` (forks of a small process in
# pause(), a few hundred KiB each, THREADS threads each, default 1; python forks were ~0.8 MiB
# each and 50,000 of them exhausted 24 GiB), which keeps them until its standard input, a fifo
# this shell holds open, ends, and then kills exactly them; it returns once they are all
# running. Sets $dir, a temporary directory the caller may use too; `unhold` (call it from the
# caller's EXIT trap) ends them and removes $dir.

hold() {
    local bench=$1 tasks=$2 threads=${3:-1}
    [ -x "$bench" ] || { echo "$bench not built (cargo build --release)" >&2; exit 1; }
    dir=$(mktemp -d)
    mkfifo "$dir/in"
    "$bench" hold --tasks "$tasks" --threads "$threads" < "$dir/in" > "$dir/out" &
    holder=$!
    exec 4> "$dir/in"
    until grep -q ready "$dir/out"; do
        kill -0 "$holder" 2>/dev/null || { echo "taskdiag-bench hold failed" >&2; exit 1; }
        sleep 0.2
    done
}

unhold() {
    exec 4>&-
    wait "$holder" 2>/dev/null || true
    rm -rf "$dir"
}
