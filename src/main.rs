fn main() {
    std::process::exit(tfmount::cmd::main(std::env::args_os().collect()));
}
