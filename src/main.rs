fn main() {
    std::process::exit(tfmount::run_command_line(std::env::args_os().collect()));
}
