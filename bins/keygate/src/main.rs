use keygate::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_args();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info,actix_server=warn"))
        .init();
    match cli.command.unwrap_or(Command::Serve(Box::new(cli.serve))) {
        Command::Serve(args) => match keygate::server::run_forever(args.into_config(&cli.database_url)) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("keygate: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
        admin => keygate::admin::run(&cli.database_url, admin),
    }
}
