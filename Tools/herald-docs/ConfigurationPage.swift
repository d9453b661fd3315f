import HeraldAPI
import HeraldDelivery
import HeraldRuntime
import HeraldSettings
import HeraldStorage

/// `docs/configuration.md`: every key a Herald process reads, grouped by the processes that
/// read it, from the same catalogues the configurations read their keys with.
enum ConfigurationPage {
    /// The tables, in the order the page lists them.
    static let sections: [SettingsDocument.Section] = [
        .init(
            title: "Every process",
            readers: "`herald-api`, `herald-worker` and `heraldctl` read these.",
            settings: SettingsReader.settings + RuntimeConfiguration.settings),
        .init(
            title: "Storage",
            readers:
                "`herald-api`, `herald-worker` and `heraldctl` read these: the limits and database behaviour of what the stores write.",
            settings: StorageConfiguration.settings),
        .init(title: "herald-api", readers: "`herald-api` reads these.", settings: APIConfiguration.settings),
        .init(
            title: "herald-worker", readers: "`herald-worker` reads these.", settings: DeliveryConfiguration.settings),
    ]

    /// The page's Markdown.
    static var markdown: String { SettingsDocument(sections).markdown }
}
