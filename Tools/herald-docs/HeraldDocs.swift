/// `herald-docs`: prints `docs/configuration.md`, rendered from the `Setting` declarations
/// (`make docs` writes it; a test fails when the committed file differs).
@main
struct HeraldDocs {
    static func main() {
        print(ConfigurationPage.markdown, terminator: "")
    }
}
