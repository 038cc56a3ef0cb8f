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
    let app = match Application::build(settings).await {
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
    if let Some(token) = &app.generated_admin_token {
        println!("Generated admin token (shown once; only its SHA-256 is stored): {token}");
    }
    tracing::info!(%addr, backend = app.backend(), "listening");
    if let Err(e) = app.run_until_stopped(shutdown).await {
        tracing::error!(error = %e, "server error");
        return std::process::ExitCode::FAILURE;
    }
    tracing::info!("stopped");
    std::process::ExitCode::SUCCESS
}
