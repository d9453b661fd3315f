import Foundation
import PackagePlugin

/// Embeds files of the target it is applied to into generated Swift source, byte for byte, so
/// every binary carries them: no resource bundle to ship next to it, no dependence on the
/// working directory, no way to serve one build's files from another build.
///
/// - `HeraldStorage`: Herald's migrations, `migrations/NNNN_name.sql` at the top of the
///   repository, as `embeddedMigrationFiles` (file name and text). The target reaches the folder
///   through a symbolic link beside the migration runner (`Sources/HeraldStorage/Migrations/SQL`
///   → `../../../migrations`): that makes the files part of the target as SwiftPM sees it, so
///   adding, editing, renaming or deleting a migration re-plans the build and re-runs this plugin
///   (a folder outside every target would be read once and then go stale).
/// - `HeraldAPI`: the dashboard's files, `Sources/HeraldAPI/Dashboard/*.{html,css,js,svg}`, as
///   `embeddedDashboardFiles` (file name and bytes), which `herald-api` serves at `/dashboard`.
///
/// A target with files of both kinds gets both; one with neither gets nothing.
@main
struct EmbedFiles: BuildToolPlugin {
    /// The dashboard's file types.
    static let dashboardSuffixes = ["html", "css", "js", "svg"]

    func createBuildCommands(context: PluginContext, target: any Target) async throws -> [Command] {
        guard let module = target.sourceModule else { return [] }
        let tool = try context.tool(named: "embed-files").url
        var commands: [Command] = []
        let migrations = module.sourceFiles(withSuffix: "sql").map { $0.url }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        if !migrations.isEmpty {
            let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
            commands.append(
                .buildCommand(
                    displayName: "Embedding Herald's migrations in \(target.name)",
                    executable: tool,
                    arguments: ["migrations", output.path(percentEncoded: false)]
                        + migrations.map { $0.path(percentEncoded: false) },
                    inputFiles: migrations,
                    outputFiles: [output]))
        }
        let dashboard = Self.dashboardSuffixes.flatMap { module.sourceFiles(withSuffix: $0).map(\.url) }
            .filter { $0.deletingLastPathComponent().lastPathComponent == "Dashboard" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        if !dashboard.isEmpty {
            let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedDashboard.swift")
            commands.append(
                .buildCommand(
                    displayName: "Embedding the dashboard's files in \(target.name)",
                    executable: tool,
                    arguments: ["dashboard", output.path(percentEncoded: false)]
                        + dashboard.map { $0.path(percentEncoded: false) },
                    inputFiles: dashboard,
                    outputFiles: [output]))
        }
        return commands
    }
}
