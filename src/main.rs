use clap::Parser;

fn main() {
    let args = tfmount::cli::Args::parse();
    std::process::exit(tfmount::mount::run(args));
}
