//! The kernel's floor under a delivery: CPU one thread spends writing one
//! small WebSocket frame to each of many loopback TCP sockets whose reader
//! waits in epoll, as a broadcast does.
//!
//! No gateway can deliver a message over TCP for less than one `send` to
//! the recipient's socket. On loopback that `send` also runs the
//! receiving side of TCP (the softirq runs in the sender's context) and
//! wakes the reader, all charged to the sender. This bench measures that
//! floor on the machine at hand, so the gateway's own figure
//! (`loadtest fanout`: server CPU per delivery) can be split into what the
//! kernel costs and what pushgate adds.
//!
//! Run with `cargo bench --bench send_floor` (9,000 sockets, 20 rounds);
//! `SEND_FLOOR_SOCKETS` and `SEND_FLOOR_ROUNDS` change the sizes. Without
//! `--bench` (as `cargo test --benches` runs it) it does one small pass.
//!
//! The writer's CPU time is its own thread's (`/proc/thread-self/schedstat`,
//! nanoseconds), so the reader thread, which stands in for the clients,
//! is not counted.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt as _;

/// A 62-byte payload in an unmasked server text frame (2-byte header).
const FRAME_PAYLOAD: &[u8] = br#"{"type":"message","cursor":"00000000deadbeef-1","data":"hello"}"#;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sockets = env_usize("SEND_FLOOR_SOCKETS", if full { 9_000 } else { 200 });
    let rounds = env_usize("SEND_FLOOR_ROUNDS", if full { 20 } else { 3 });
    if let Err(err) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("send_floor: cannot raise the open-files limit: {err}");
    }

    let frame = ws_text_frame(FRAME_PAYLOAD);
    let (writers, readers) = connect_pairs(sockets);
    let received = Arc::new(AtomicU64::new(0));
    let reader = spawn_reader(readers, Arc::clone(&received));

    let mut per_write_ns = Vec::with_capacity(rounds);
    let mut writers = writers;
    for round in 1..=rounds {
        let before = thread_cpu_ns();
        for socket in &mut writers {
            socket
                .write_all(&frame)
                .expect("write to a loopback socket");
        }
        let spent = thread_cpu_ns().saturating_sub(before);
        per_write_ns.push(spent as f64 / sockets as f64);
        let want = (round * sockets * frame.len()) as u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while received.load(Ordering::Relaxed) < want {
            assert!(Instant::now() < deadline, "the reader fell behind");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Let the reader go back to sleep in epoll, as idle clients are
        // between broadcasts.
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(writers);
    let _ = reader.join();

    per_write_ns.sort_by(f64::total_cmp);
    let median = per_write_ns[per_write_ns.len() / 2];
    let (min, max) = (per_write_ns[0], per_write_ns[per_write_ns.len() - 1]);
    println!("| sockets | rounds | frame bytes | CPU per write, median (min / max) |");
    println!("| --: | --: | --: | --: |");
    println!(
        "| {sockets} | {rounds} | {} | {:.2} µs ({:.2} / {:.2}) |",
        frame.len(),
        median / 1e3,
        min / 1e3,
        max / 1e3
    );
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// An unmasked text frame, as a server sends (payloads under 126 bytes).
fn ws_text_frame(payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut frame = vec![0x81, payload.len() as u8];
    frame.extend_from_slice(payload);
    frame
}

/// `n` connected pairs: the accepted (server) ends, blocking, no Nagle, as
/// the gateway sets them; and the client ends.
fn connect_pairs(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let mut servers = Vec::with_capacity(n);
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let client = TcpStream::connect(addr).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nodelay(true).expect("nodelay");
        clients.push(client);
        servers.push(server);
    }
    (servers, clients)
}

/// Reads every client socket on one thread (a tokio current-thread
/// runtime, so each waits in epoll), counting bytes.
fn spawn_reader(clients: Vec<TcpStream>, received: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let mut tasks = Vec::with_capacity(clients.len());
            for client in clients {
                client.set_nonblocking(true).expect("nonblocking");
                let mut client = tokio::net::TcpStream::from_std(client).expect("register");
                let received = Arc::clone(&received);
                tasks.push(tokio::spawn(async move {
                    let mut buf = [0u8; 512];
                    while let Ok(n @ 1..) = client.read(&mut buf).await {
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }));
            }
            for task in tasks {
                let _ = task.await;
            }
        });
    })
}

/// CPU time of the calling thread so far, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut stat = String::new();
    std::fs::File::open("/proc/thread-self/schedstat")
        .and_then(|mut f| f.read_to_string(&mut stat))
        .expect("read /proc/thread-self/schedstat");
    stat.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .expect("schedstat's first field is on-CPU time in ns")
}
