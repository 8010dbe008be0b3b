//! The `pushgate` binary: command line, configuration, logs, signals.
//! The only place `anyhow` is used.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use pushgate::config::{Config, Loaded};
use pushgate::protocol::{Channel, UserId};
use tracing::{info, warn};

/// The allocator: jemalloc, which spends less per connection than glibc's
/// malloc (README, "What each change bought"). Off without the `jemalloc`
/// feature, for valgrind's dhat and memcheck.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The configuration file read when `--config` is not given.
const DEFAULT_CONFIG: &str = "config.toml";
/// File descriptors kept for listeners, logs and Redis besides connections.
const SPARE_FDS: u64 = 100;

/// `--version`: the package version and the commit it was built from
/// (`build.rs`; "unknown" outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILD_GIT_COMMIT"),
    ")"
);

/// pushgate: a long-connection push gateway (WebSocket, long-poll, SSE).
#[derive(Debug, Parser)]
#[command(version = VERSION, about)]
struct Cli {
    /// Configuration file. Default: ./config.toml if it exists, else the
    /// built-in defaults. Every key can be overridden by an environment
    /// variable PUSHGATE_<SECTION>_<KEY>.
    #[arg(long, global = true, env = "PUSHGATE_CONFIG")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve (the default).
    Serve,
    /// Print a client token for a user id, signed with [auth] secret.
    Token {
        /// The user id (1 to 128 bytes of A-Z a-z 0-9 _ . : @ -).
        uid: String,
        /// Seconds until the token expires.
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
        /// A channel for the token's `channels` claim (the user's
        /// connections join it on connect); repeat for more.
        #[arg(long = "channel", value_name = "NAME")]
        channels: Vec<String>,
    },
    /// Validate the configuration and print it, secrets masked.
    CheckConfig,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), built from these same definitions.
    Man {
        /// Write pushgate.1 and a page per subcommand (pushgate-serve.1,
        /// ...) into this directory instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(cli.config.as_deref()),
        Command::Token { uid, ttl, channels } => {
            let config = load(cli.config.as_deref())?;
            note_ignored_env(&config);
            let config = config.config;
            let user = UserId::parse(&uid).with_context(|| format!("bad user id {uid:?}"))?;
            let channels = channels
                .iter()
                .map(|name| {
                    Channel::parse(name).with_context(|| format!("bad channel name {name:?}"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let expires_at = pushgate::gateway::Gateway::unix_now().saturating_add(ttl);
            if config.auth.secret.is_empty() {
                anyhow::bail!(
                    "auth.secret is not set: pushgate token mints HS256 tokens signed with it"
                );
            }
            let secret = config.auth.secret.as_bytes();
            println!(
                "{}",
                pushgate::auth::token::mint_with_channels(secret, &user, expires_at, &channels)
            );
            Ok(())
        }
        Command::CheckConfig => {
            let loaded = load(cli.config.as_deref())?;
            note_ignored_env(&loaded);
            print!("{}", loaded.config.to_masked_toml());
            Ok(())
        }
        Command::Completions { shell } => {
            let mut out = std::io::stdout();
            clap_complete::generate(shell, &mut Cli::command(), "pushgate", &mut out);
            Ok(())
        }
        Command::Man { dir: None } => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            Ok(())
        }
        Command::Man { dir: Some(dir) } => clap_mangen::generate_to(Cli::command(), &dir)
            .with_context(|| format!("cannot write man pages to {}", dir.display())),
    }
}

/// Loads and validates the configuration: the given file, or
/// ./config.toml if present, or the built-in defaults; then the
/// environment overlay.
fn load(path: Option<&Path>) -> anyhow::Result<Loaded> {
    // Variables that are not UTF-8 cannot be ours; skip them rather than panic.
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let config = match path {
        Some(path) => Config::load(path, env),
        None if Path::new(DEFAULT_CONFIG).exists() => Config::load(Path::new(DEFAULT_CONFIG), env),
        None => Config::load_without_file(env),
    };
    config.context("invalid configuration")
}

/// Tells a command without logs, on stderr, which variables the
/// environment overlay ignored.
fn note_ignored_env(loaded: &Loaded) {
    if let Some(warning) = loaded.ignored_env_warning() {
        eprintln!("warning: {warning}");
    }
}

fn serve(path: Option<&Path>) -> anyhow::Result<()> {
    let loaded = load(path)?;
    pushgate::telemetry::init(&loaded.config.log)
        .map_err(|err| anyhow::anyhow!("cannot start logging: {err}"))?;
    if let Some(warning) = loaded.ignored_env_warning() {
        warn!("{warning}");
    }
    let config = loaded.config;
    warn_about(&config);
    raise_open_files_limit(config.session.max_connections as u64);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = config.server.threads_per_kind() {
        runtime.worker_threads(workers);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let server = pushgate::Server::bind(config).await?;
        info!(addr = %server.local_addr(), version = VERSION, "listening");
        // Served from a task on the runtime's workers, not from this
        // thread: the accept loop polled here would wake this thread for
        // every connection and hand each one back to a worker (two thread
        // wake-ups per accept instead of none).
        tokio::spawn(server.run(shutdown_signal()))
            .await
            .context("the server task failed")?;
        anyhow::Ok(())
    })
}

fn warn_about(config: &Config) {
    if config.auth.uses_shipped_dev_values() {
        warn!(
            "auth.secret or auth.api_key is the shipped development value: replace both before exposing this gateway"
        );
    }
    if config.demo.enabled {
        warn!(
            "demo mode is on: /demo/token and /demo/push let anyone act as any user and push to everyone"
        );
    }
    if config.auth.anonymous {
        warn!("auth.anonymous is on: any client may claim any user id with ?uid=");
    }
}

/// Raises the soft open-files limit to the hard one and warns when
/// `max_connections` cannot fit under it.
fn raise_open_files_limit(max_connections: u64) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < max_connections + SPARE_FDS => warn!(
            limit,
            max_connections,
            "session.max_connections does not fit under the open-files limit; connections past about {} will be refused by the kernel",
            limit.saturating_sub(SPARE_FDS)
        ),
        Ok(limit) => info!(limit, "open-files limit"),
        Err(err) => warn!(error = %err, "cannot read or raise the open-files limit"),
    }
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => info!("SIGINT: draining"),
        () = term => info!("SIGTERM: draining"),
    }
}
