#!/usr/bin/env bash
# run.sh BIN N OUT: dhat over N WebSockets opened, held, closed
bin=$1 n=$2 out=$3
valgrind --tool=dhat --dhat-out-file=$out.json $bin --config /tmp/dhat/gw.toml > $out.log 2>&1 &
vpid=$!
for i in $(seq 1 200); do grep -q serving $out.log 2>/dev/null && break; sleep 0.2; done
if [ "$n" -gt 0 ]; then
  LOADTEST_API_KEY=loadtest-api-key-not-for-production /work/ci-target/release/loadtest idle -n $n --hold-secs 2 --release-secs 2 --ws-url "ws://127.0.0.1:18080/ws?uid={user}" > $out.client 2>&1
fi
sleep 1
kill -TERM $vpid; wait $vpid
grep -E "Total:|At t-gmax" $out.log
