use keygate::{Cli, Command};
use keygate_domain::redact_in;

/// mimalloc: per-thread heaps and cheap frees from another thread (a verification's spend is
/// allocated by a worker and released by the credit writer).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
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
