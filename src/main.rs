fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if tfmount::cli::is_subcommand(argv.get(1).map(|a| a.as_os_str())) {
        let cmd = tfmount::cli::parse_cli(argv);
        std::process::exit(tfmount::cmd::run(cmd));
    }
    let args = tfmount::cli::parse_mount(argv);
    std::process::exit(tfmount::mount::run(args));
}
