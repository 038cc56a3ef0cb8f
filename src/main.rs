use dirichlet_release::config::Settings;
use dirichlet_release::startup::{shutdown_signal, Application};
use dirichlet_release::telemetry;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let settings = match Settings::load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dirichlet-release: {e}");
            return std::process::ExitCode::from(2);
        }
    };
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
