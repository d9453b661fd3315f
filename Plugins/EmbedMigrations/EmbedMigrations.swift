import Foundation
import PackagePlugin

/// Embeds Herald's migration files, `migrations/NNNN_name.sql` at the top of the repository,
/// into generated Swift source of the target it is applied to (`HeraldStorage`), byte for byte.
///
/// So `migrations/` is the one copy of Herald's schema, and every binary carries the
/// migrations it was built with: no resource bundle to ship next to it, no dependence on the
/// working directory, no way to run one build's runner against another build's files.
///
/// The target reaches the folder through a symbolic link (`Sources/HeraldStorage/Migrations`
/// → `../../migrations`): that makes the files part of the target as SwiftPM sees it, so
/// adding, editing, renaming or deleting a migration re-plans the build and re-runs this
/// plugin (a folder outside every target would be read once and then go stale).
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) async throws -> [Command] {
        guard let module = target.sourceModule else { return [] }
        let files = module.sourceFiles(withSuffix: "sql").map { $0.url }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding Herald's migrations in \(target.name)",
                executable: try context.tool(named: "embed-migrations").url,
                arguments: [output.path(percentEncoded: false)] + files.map { $0.path(percentEncoded: false) },
                inputFiles: files,
                outputFiles: [output])
        ]
    }
}
