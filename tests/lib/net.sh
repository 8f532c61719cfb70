# Shell helpers shared by the test runners (tests/compat/run.sh, tests/cql/run.sh): source it.

free_ports() { # prints N distinct free TCP ports on 127.0.0.1, below the ephemeral range
  python3 - "$1" <<'PY'
import random, socket, sys
socks = []
while len(socks) < int(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(20000, 32000)))
        socks.append(s)
    except OSError:
        s.close()
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

wait_for_port() { # host port seconds pid-or-empty: 0 open, 1 timed out, 2 the pid exited
  local start=$SECONDS
  until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
    if [[ -n "$4" ]] && ! kill -0 "$4" 2>/dev/null; then return 2; fi
    (( SECONDS - start > $3 )) && return 1
    sleep 0.2
  done
}
