use clap::Parser;

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if tfmount::cli::is_subcommand(argv.get(1).map(|a| a.as_os_str())) {
        let cli = tfmount::cli::Cli::parse_from(argv);
        std::process::exit(tfmount::cmd::run(cli.command));
    }
    let args = tfmount::cli::Args::parse_from(argv);
    std::process::exit(tfmount::mount::run(args));
}
