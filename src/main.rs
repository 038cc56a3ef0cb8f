use dirichlet_release::config::Settings;
use dirichlet_release::healthcheck;
use dirichlet_release::startup::{shutdown_signal, Application};
use dirichlet_release::telemetry;

const USAGE: &str = "usage: dirichlet-release                     serve (configured by config/default.toml, DIRICHLET_CONFIG and DIRICHLET_* variables)
       dirichlet-release healthcheck [--ready]  exit 0 if the local server answers 200 on /healthz (/readyz), else 1";

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Hidden: the group commit statement for scripts/bench/bench-group-statement.sh, which
    // benchmarks it in pgbench without the service. Needs no configuration.
    if let [command, variant] = args.as_slice() {
        if command == "group-statement" {
            return group_statement(variant);
        }
    }
    let settings = match Settings::load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dirichlet-release: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => serve(settings),
        ["healthcheck"] => healthcheck(&settings, "/healthz"),
        ["healthcheck", "--ready"] => healthcheck(&settings, "/readyz"),
        _ => {
            eprintln!("{USAGE}");
            std::process::ExitCode::from(2)
        }
    }
}

fn group_statement(variant: &str) -> std::process::ExitCode {
    let texts = dirichlet_release::store::postgres::group_statement_texts();
    match texts.iter().find(|(name, _)| *name == variant) {
        Some((_, sql)) => {
            println!("{sql}");
            std::process::ExitCode::SUCCESS
        }
        None => {
            let names: Vec<&str> = texts.iter().map(|(name, _)| *name).collect();
            eprintln!(
                "dirichlet-release group-statement: one of {}",
                names.join(", ")
            );
            std::process::ExitCode::from(2)
        }
    }
}

/// No runtime, no logging: one blocking request, a line on failure, the exit status.
fn healthcheck(settings: &Settings, path: &str) -> std::process::ExitCode {
    match healthcheck::check(healthcheck::target(settings.listen), path) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dirichlet-release healthcheck: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn serve(settings: Settings) -> std::process::ExitCode {
    telemetry::init(settings.log_format, &settings.log_level);
    // Listening comes first: the database may not be up yet (start-up retries it, and /readyz
    // answers 503 meanwhile).
    let app = match Application::start(settings).await {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %e, "start-up failed");
            eprintln!("dirichlet-release: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Before the announcement: whoever reads it may signal at once.
    let shutdown = shutdown_signal();
    let addr = app.local_addr();
    println!(
        "dirichlet-release listening on http://{addr} ({} backend)",
        app.backend()
    );
    println!("Console: http://{addr}/console (sign in with the admin token)");
    tracing::info!(%addr, backend = app.backend(), "listening");
    let readiness = app.readiness();
    tokio::spawn(async move {
        if let Ok(connected) = readiness.wait().await {
            if let Some(token) = connected.generated_admin_token {
                println!("Generated admin token (shown once; only its SHA-256 is stored): {token}");
            }
            println!("dirichlet-release ready: the database is connected");
            tracing::info!("ready");
        }
    });
    if let Err(e) = app.run_until_stopped(shutdown).await {
        tracing::error!(error = %e, "stopped on an error");
        eprintln!("dirichlet-release: {e}");
        return std::process::ExitCode::FAILURE;
    }
    tracing::info!("stopped");
    std::process::ExitCode::SUCCESS
}
