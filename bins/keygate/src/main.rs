use keygate::{Cli, Command};
use keygate_domain::redact_in;

/// jemalloc: per-thread caches, cheap frees from another thread (a verification's spend is
/// allocated by a worker and released by the credit writer), memory given back to the system
/// after a second unused (its decay: `dirty_decay_ms:1000`, built in by `.cargo/config.toml`),
/// and statistics of what the process holds
/// (`keygate_memory_bytes` in `/metrics`). mimalloc 3, before it, held about twice the
/// memory over the same 30-minute soak (docs/soak/README.md), with nothing to tell what.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // jemalloc's background threads give freed pages back on their decay schedule (1 s);
    // without them an arena purges only when its own threads allocate again, so the pages a
    // thread freed before going idle (the rate-limit windows' sweep, a flush) stayed resident.
    // Not fatal where it cannot start them: the memory is then only given back later.
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!(
            "keygate: the allocator's background threads did not start ({e}); freed memory is given back later"
        );
    }
    let cli = Cli::parse_args();
    // The access log (one line per request, target `keygate::access`) is off by default;
    // `RUST_LOG=info` or `RUST_LOG=info,keygate::access=info` turns it on.
    keygate::logging::ThrottledLogger::install(
        "info,actix_server=warn,keygate::access=off",
        cli.log.as_deref(),
        cli.log_format.as_deref(),
    );
    match cli.command.unwrap_or(Command::Serve(Box::new(cli.serve))) {
        Command::Serve(args) => {
            let config = args.into_config(&cli.database_url);
            // Whatever a failure says, the URLs' credentials are not part of it.
            let urls: Vec<String> =
                [Some(config.database_url.clone()), config.redis_url.clone()].into_iter().flatten().collect();
            match keygate::server::run_forever(config) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    let msg = urls.iter().fold(format!("{e:#}"), |msg, url| redact_in(&msg, url));
                    // One line (libpq's messages span several).
                    eprintln!("keygate: {}", msg.split_whitespace().collect::<Vec<_>>().join(" "));
                    match e.downcast_ref::<keygate::server::MissingEncryptionKeys>() {
                        Some(_) => std::process::ExitCode::from(2),
                        None => std::process::ExitCode::FAILURE,
                    }
                }
            }
        }
        Command::Openapi { api } => match keygate::openapi::Api::parse(&api) {
            Some(api) => {
                // Not `print!`: a closed pipe (`| head`) is an error to report, not a panic.
                use std::io::Write;
                match std::io::stdout().lock().write_all(keygate::openapi::document::render(api).as_bytes()) {
                    Ok(()) => std::process::ExitCode::SUCCESS,
                    Err(_) => std::process::ExitCode::FAILURE,
                }
            }
            None => std::process::ExitCode::from(2),
        },
        admin => keygate::admin::run(&cli.database_url, admin),
    }
}
