//! The server's own numbers from `/proc/<pid>`: resident memory
//! (`smaps_rollup`: Rss and Pss), CPU time (`stat`: utime + stime, and
//! each thread's `schedstat` to the nanosecond) and context switches
//! (each thread's `status`).
//!
//! A server may be several processes (nginx: a master and its workers),
//! so [`sample_tree`] sums a process and its children.

use std::time::Instant;

use anyhow::Context as _;
use serde::Serialize;

/// One reading of a process.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sample {
    /// Resident set, KiB.
    pub rss_kib: u64,
    /// Proportional set, KiB.
    pub pss_kib: u64,
    /// User plus system CPU time, µs (resolution: one clock tick).
    pub cpu_us: u64,
    /// Time on a core of the threads alive now, ns (`task/*/schedstat`):
    /// CPU time to the nanosecond, less what ended threads had (see
    /// [`Sample::cpu_us_since`]). `None` if the task list is unreadable.
    pub run_ns: Option<u64>,
    /// Threads.
    pub threads: u64,
    /// Context switches of its threads so far, voluntary (it waited: a
    /// wake-up to come) and not (the scheduler took the core), summed over
    /// the threads alive now.
    pub switches: u64,
    /// Processes summed (1 for a single process).
    pub processes: u64,
    /// When it was read.
    #[serde(skip)]
    pub at: Instant,
}

/// Reads process `pid` now.
pub(crate) fn sample(pid: u32) -> anyhow::Result<Sample> {
    let at = Instant::now();
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("cannot read /proc/{pid}/smaps_rollup"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    let (cpu_ticks, threads) = parse_stat(&stat).context("malformed /proc/<pid>/stat")?;
    Ok(Sample {
        rss_kib: rollup_field(&rollup, "Rss:").unwrap_or(0),
        pss_kib: rollup_field(&rollup, "Pss:").unwrap_or(0),
        cpu_us: cpu_ticks * 1_000_000 / clock_ticks_per_sec(),
        run_ns: run_ns(pid),
        threads,
        switches: switches(pid),
        processes: 1,
        at,
    })
}

impl Sample {
    /// Adds `other`'s readings to this one's (a group of processes read as
    /// one; the time stays this reading's).
    fn add(&mut self, other: &Sample) {
        self.rss_kib += other.rss_kib;
        self.pss_kib += other.pss_kib;
        self.cpu_us += other.cpu_us;
        self.run_ns = self.run_ns.zip(other.run_ns).map(|(a, b)| a + b);
        self.threads += other.threads;
        self.switches += other.switches;
        self.processes += other.processes;
    }

    /// CPU time spent from `before` to this reading, µs. From the
    /// threads' `schedstat`, to the nanosecond: at 100 ticks a second,
    /// `stat`'s figure moves in steps of 10 ms, which is 1 µs a
    /// connection over 10,000 opens of 15 µs each (a ratio of two such
    /// figures moves by several per cent). `stat`'s figure instead when
    /// the threads' sum falls short of it by more than its rounding: a
    /// thread that ended in between took its time out of the sum.
    pub(crate) fn cpu_us_since(&self, before: &Sample) -> u64 {
        let ticks = self.cpu_us.saturating_sub(before.cpu_us);
        let Some(run_ns) = self
            .run_ns
            .zip(before.run_ns)
            .and_then(|(after, before)| after.checked_sub(before))
        else {
            return ticks;
        };
        let precise = run_ns / 1_000;
        // utime and stime are each rounded down to a tick, in both
        // readings, in every process.
        let rounding = 2 * self.processes.max(before.processes) * 1_000_000 / clock_ticks_per_sec();
        if precise + rounding >= ticks {
            precise
        } else {
            ticks
        }
    }
}

/// The time on a core of `pid`'s threads alive now, ns (each
/// `/proc/<pid>/task/<tid>/schedstat`'s first field); a thread that ends
/// meanwhile is skipped.
fn run_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .filter_map(Result::ok)
            .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
            .filter_map(|text| parse_schedstat(&text))
            .map(|times| times.run_ns)
            .sum(),
    )
}

/// Context switches of `pid`'s threads so far (`/proc/<pid>/task/*/status`,
/// voluntary plus nonvoluntary); a thread that ends meanwhile is skipped.
fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .map(|status| status_switches(&status))
        .sum()
}

/// The sum of a thread `status` text's `voluntary_ctxt_switches` and
/// `nonvoluntary_ctxt_switches`.
fn status_switches(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        })
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

/// Reads process `pid` and its child processes (nginx's workers are the
/// master's children) now, and sums them. Rss of the processes is summed
/// as is, so pages they share (code, shared memory) count once per
/// process; Pss splits shared pages between them and sums to what the
/// group really holds. A child that vanishes meanwhile is skipped.
pub(crate) fn sample_tree(pid: u32) -> anyhow::Result<Sample> {
    let mut total = sample(pid)?;
    for child in children(pid) {
        if let Ok(s) = sample(child) {
            total.add(&s);
        }
    }
    Ok(total)
}

/// Reads each of `pids` with its children ([`sample_tree`]) and sums them:
/// one figure for several gateway nodes. Fails if any cannot be read.
pub(crate) fn sample_pids(pids: &[u32]) -> anyhow::Result<Sample> {
    let (first, rest) = pids.split_first().context("no pid to sample")?;
    let mut total = sample_tree(*first)?;
    for &pid in rest {
        total.add(&sample_tree(pid)?);
    }
    Ok(total)
}

/// CPU time of a group of threads that share a name, from each thread's
/// `schedstat` (nanoseconds, not clock ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ThreadTimes {
    /// On a core, ns.
    pub run_ns: u64,
    /// Runnable but waiting for a core, ns: what sharing the machine cost.
    pub wait_ns: u64,
    /// Times it was put on a core.
    pub slices: u64,
    /// Of the time on a core, how much in the kernel (`stat`'s stime),
    /// µs, at a clock tick's resolution.
    pub system_us: u64,
}

impl ThreadTimes {
    /// What happened between `before` and `self` (a thread that began
    /// meanwhile counts from zero).
    pub(crate) fn since(self, before: Self) -> Self {
        Self {
            run_ns: self.run_ns.saturating_sub(before.run_ns),
            wait_ns: self.wait_ns.saturating_sub(before.wait_ns),
            slices: self.slices.saturating_sub(before.slices),
            system_us: self.system_us.saturating_sub(before.system_us),
        }
    }
}

/// The threads of `pids` now, summed by thread name (`comm`): where a
/// server's CPU goes (runtime workers, fan-out threads, ...). A thread that
/// ends meanwhile is skipped.
pub(crate) fn threads_by_name(pids: &[u32]) -> std::collections::BTreeMap<String, ThreadTimes> {
    let mut by_name = std::collections::BTreeMap::<String, ThreadTimes>::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.filter_map(Result::ok) {
            let path = task.path();
            let (Ok(name), Ok(schedstat), Ok(stat)) = (
                std::fs::read_to_string(path.join("comm")),
                std::fs::read_to_string(path.join("schedstat")),
                std::fs::read_to_string(path.join("stat")),
            ) else {
                continue;
            };
            let (Some(times), Some(system_ticks)) =
                (parse_schedstat(&schedstat), stat_field(&stat, 15))
            else {
                continue;
            };
            let total = by_name.entry(name.trim().to_owned()).or_default();
            total.run_ns += times.run_ns;
            total.wait_ns += times.wait_ns;
            total.slices += times.slices;
            total.system_us += system_ticks * 1_000_000 / clock_ticks_per_sec();
        }
    }
    by_name
}

/// A `schedstat` line: run time (ns), run-queue wait (ns), time slices.
fn parse_schedstat(text: &str) -> Option<ThreadTimes> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some(ThreadTimes {
        run_ns: fields.next()??,
        wait_ns: fields.next()??,
        slices: fields.next()??,
        system_us: 0,
    })
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != pid)
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|stat| parent_of(&stat))
                == Some(pid)
        })
        .collect()
}

/// The parent pid (field 4) of a `/proc/<pid>/stat` line.
fn parent_of(stat: &str) -> Option<u32> {
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The machine's `TcpExt: ListenOverflows` counter (connections dropped
/// because an accept queue was full), from `/proc/net/netstat`.
pub(crate) fn listen_overflows() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    netstat_field(&text, "TcpExt:", "ListenOverflows")
}

/// Field `name` of the `prefix` pair of lines (names, then values).
fn netstat_field(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// A `Name:   123 kB` line of `smaps_rollup`, in KiB.
fn rollup_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// utime + stime (ticks) and the thread count from `/proc/<pid>/stat`.
fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    let field = |n| stat_field(stat, n);
    Some((field(14)? + field(15)?, field(20)?))
}

/// Numeric field `n` (from 3, the state, on) of a `/proc/<pid>/stat` line.
fn stat_field(stat: &str, n: usize) -> Option<u64> {
    // The command name (field 2) may hold spaces; fields after it start at
    // field 3 (state).
    let after = stat.get(stat.rfind(')')? + 2..)?;
    after
        .split_whitespace()
        .nth(n.checked_sub(3)?)?
        .parse()
        .ok()
}

/// `sysconf(_SC_CLK_TCK)`, asked of `getconf` once; 100 if that fails.
fn clock_ticks_per_sec() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_found_past_a_name_with_spaces() {
        let stat = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 7 0 100 200 300";
        assert_eq!(parse_stat(stat), Some((300, 7)));
    }

    #[test]
    fn rollup_fields_are_read_in_kib() {
        let text = "55d0-7ff [rollup]\nRss:               16384 kB\nPss:               12000 kB\n";
        assert_eq!(rollup_field(text, "Rss:"), Some(16384));
        assert_eq!(rollup_field(text, "Pss:"), Some(12000));
        assert_eq!(rollup_field(text, "Swap:"), None);
    }

    #[test]
    fn netstat_pairs_name_values() {
        let text = "TcpExt: SyncookiesSent ListenOverflows\nTcpExt: 0 1503\nIpExt: A\nIpExt: 1\n";
        assert_eq!(
            netstat_field(text, "TcpExt:", "ListenOverflows"),
            Some(1503)
        );
        assert_eq!(netstat_field(text, "TcpExt:", "Nope"), None);
    }

    #[test]
    fn switches_are_voluntary_plus_nonvoluntary() {
        let status = "Name:\tpushgate\nThreads:\t4\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(status_switches(status), 127);
        assert_eq!(status_switches("Name:\tx\n"), 0);
    }

    #[test]
    fn own_process_can_be_sampled() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_kib > 0 && s.threads >= 1);
        assert!(s.run_ns.is_some_and(|ns| ns > 0));
    }

    /// A reading with `cpu_us` from `stat` and `run_ns` from the threads.
    fn reading(cpu_us: u64, run_ns: Option<u64>, processes: u64) -> Sample {
        Sample {
            rss_kib: 0,
            pss_kib: 0,
            cpu_us,
            run_ns,
            threads: 1,
            switches: 0,
            processes,
            at: Instant::now(),
        }
    }

    #[test]
    fn cpu_time_comes_from_the_threads_to_the_nanosecond() {
        let tick = 1_000_000 / clock_ticks_per_sec();
        let before = reading(100 * tick, Some(100 * tick * 1_000 + 4_321), 1);
        // 15.37 ticks later: stat says 15 or 16 ticks, the threads 15.37.
        let spent_ns = 1_537 * tick * 10;
        let after = reading(115 * tick, Some(100 * tick * 1_000 + 4_321 + spent_ns), 1);
        assert_eq!(after.cpu_us_since(&before), spent_ns / 1_000);
        let after = reading(116 * tick, Some(100 * tick * 1_000 + 4_321 + spent_ns), 1);
        assert_eq!(after.cpu_us_since(&before), spent_ns / 1_000);
    }

    #[test]
    fn cpu_time_falls_back_to_stat_when_an_ended_thread_took_its_share() {
        let tick = 1_000_000 / clock_ticks_per_sec();
        let before = reading(100 * tick, Some(100 * tick * 1_000), 1);
        // stat counts 50 ticks; the threads alive now only 10 of them.
        let after = reading(150 * tick, Some(110 * tick * 1_000), 1);
        assert_eq!(after.cpu_us_since(&before), 50 * tick);
        // Within stat's rounding (two ticks a process) the threads win.
        let after = reading(150 * tick, Some(148 * tick * 1_000 + 1_000), 1);
        assert_eq!(after.cpu_us_since(&before), 48 * tick + 1);
        let after = reading(150 * tick, Some(147 * tick * 1_000), 1);
        assert_eq!(after.cpu_us_since(&before), 50 * tick);
        let after = reading(150 * tick, Some(147 * tick * 1_000), 2);
        assert_eq!(after.cpu_us_since(&before), 47 * tick);
        // Unreadable threads, or fewer than before: stat.
        let after = reading(150 * tick, None, 1);
        assert_eq!(after.cpu_us_since(&before), 50 * tick);
        let after = reading(150 * tick, Some(tick * 1_000), 1);
        assert_eq!(after.cpu_us_since(&before), 50 * tick);
    }

    #[test]
    fn cpu_time_is_seen_before_a_tick_passes() {
        // A child that spins, one thread: not this test process, whose
        // other tests' threads end at any time and take their time with
        // them.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let before = sample(pid).unwrap();
        // 3 ms of the child's CPU time: under a 10 ms tick.
        let waited = std::time::Instant::now();
        while run_ns(pid).unwrap() - before.run_ns.unwrap() < 3_000_000
            && waited.elapsed().as_secs() < 5
        {
            std::thread::yield_now();
        }
        let after = sample(pid).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(after.cpu_us_since(&before) >= 3_000);
    }

    #[test]
    fn several_pids_are_summed_and_a_missing_one_fails() {
        let mut a = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut b = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let one = sample_pids(&[a.id()]).unwrap();
        let both = sample_pids(&[a.id(), b.id()]).unwrap();
        assert_eq!((one.processes, both.processes), (1, 2));
        assert!(both.rss_kib > one.rss_kib);
        let _ = b.kill();
        let _ = b.wait();
        assert!(sample_pids(&[a.id(), b.id()]).is_err(), "a reaped pid");
        assert!(sample_pids(&[]).is_err());
        let _ = a.kill();
        let _ = a.wait();
    }

    #[test]
    fn parents_are_read_past_a_name_with_spaces() {
        let stat = "1234 (nginx: worker process) S 77 2 3 4";
        assert_eq!(parent_of(stat), Some(77));
    }

    #[test]
    fn schedstat_is_run_wait_and_slices() {
        let times = parse_schedstat("73223342 6061254 337\n").unwrap();
        assert_eq!(
            times,
            ThreadTimes {
                run_ns: 73_223_342,
                wait_ns: 6_061_254,
                slices: 337,
                system_us: 0
            }
        );
        assert_eq!(parse_schedstat("1 2"), None);
        let later = ThreadTimes {
            run_ns: 80_000_000,
            wait_ns: 6_061_254,
            slices: 340,
            system_us: 30_000,
        };
        assert_eq!(
            later.since(times),
            ThreadTimes {
                run_ns: 6_776_658,
                wait_ns: 0,
                slices: 3,
                system_us: 30_000
            }
        );
    }

    #[test]
    fn own_threads_are_summed_by_name() {
        let me = std::process::id();
        let name = "procstat-probe";
        let (spun, spinning) = std::sync::mpsc::channel::<()>();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        // The probe runs until it has had 20 ms on a core by its own
        // count, however long a loaded machine makes that take.
        let on_core = || {
            let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
            parse_schedstat(&text).unwrap().run_ns
        };
        let spinner = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while on_core() < 20_000_000 {
                    std::hint::spin_loop();
                }
                let _ = spun.send(());
                let _ = stopped.recv();
            })
            .unwrap();
        spinning
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the probe had 20 ms on a core");
        let threads = threads_by_name(&[me]);
        let _ = stop.send(());
        spinner.join().unwrap();
        let probe = threads.get(name).copied().unwrap_or_default();
        assert!(probe.run_ns >= 20_000_000, "{threads:?}");
        assert!(probe.slices >= 1);
    }

    #[test]
    fn a_tree_sums_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(children(me).contains(&child.id()));
        // Other tests' threads allocate meanwhile: the tree must hold more
        // than this process held just before and just after it was read.
        let before = sample(me).unwrap();
        let tree = sample_tree(me).unwrap();
        let after = sample(me).unwrap();
        assert!(tree.processes >= 2);
        assert!(tree.rss_kib > before.rss_kib.min(after.rss_kib));
        let _ = child.kill();
        let _ = child.wait();
    }
}
