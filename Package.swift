// swift-tools-version:6.1
// Herald: a self-hosted push-notification backend on Azure Notification Hubs.
// Module boundaries follow docs/architecture.md; the import rules there are checked in review.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "herald",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "NotificationHubs", targets: ["NotificationHubs"]),
        .library(name: "NotificationHubsEmulator", targets: ["NotificationHubsEmulator"]),
        .library(name: "PostgresQueue", targets: ["PostgresQueue"]),
        .library(name: "PostgresQueueTesting", targets: ["PostgresQueueTesting"]),
        .executable(name: "herald-api", targets: ["herald-api"]),
        .executable(name: "herald-worker", targets: ["herald-worker"]),
        .executable(name: "heraldctl", targets: ["heraldctl"]),
        .executable(name: "nh-emulator", targets: ["nh-emulator"]),
        .executable(name: "herald-bench", targets: ["herald-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.1"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        // `swift package generate-documentation` for the DocC catalogues of the reusable libraries.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // MARK: Reusable libraries (know nothing of Herald)
        .target(
            name: "NotificationHubs",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "NotificationHubsEmulator",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PostgresQueue",
            dependencies: [
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            resources: [.copy("Schema")],
            swiftSettings: swiftSettings
        ),
        // Helpers for an application's tests of its jobs: run one job, drain a queue, inspect jobs.
        .target(
            name: "PostgresQueueTesting",
            dependencies: [
                "PostgresQueue",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Herald
        .target(name: "HeraldDomain", swiftSettings: swiftSettings),
        // Typed, documented configuration keys on swift-configuration; every Herald module
        // declares its own keys and defaults with it.
        .target(
            name: "HeraldSettings",
            dependencies: [
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldStorage",
            dependencies: [
                "HeraldDomain", "HeraldSettings", "PostgresQueue",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings,
            plugins: ["EmbedFiles"]
        ),
        .target(
            name: "HeraldDelivery",
            dependencies: [
                "HeraldDomain", "HeraldSettings", "HeraldStorage", "PostgresQueue", "NotificationHubs",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldAPI",
            dependencies: [
                "HeraldDomain", "HeraldOps", "HeraldSettings", "HeraldStorage",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "HummingbirdBasicAuth", package: "hummingbird-auth"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("openapi.yaml")],
            swiftSettings: swiftSettings,
            plugins: ["EmbedFiles"]
        ),
        .target(
            name: "HeraldOps",
            dependencies: [
                "HeraldDomain", "HeraldStorage", "PostgresQueue",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldRuntime",
            dependencies: [
                "HeraldSettings", "HeraldStorage", "PostgresQueue",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),

        // MARK: Build plugins
        // Embeds `migrations/*.sql` (the one copy, at the top of the repository) into HeraldStorage,
        // and the dashboard's files (Sources/HeraldAPI/Dashboard) into HeraldAPI.
        .plugin(name: "EmbedFiles", capability: .buildTool(), dependencies: ["embed-files"]),
        .executableTarget(name: "embed-files", path: "Plugins/EmbedFilesTool", swiftSettings: swiftSettings),

        // MARK: Executables (parsing and wiring only)
        .executableTarget(
            name: "herald-api",
            dependencies: [
                "HeraldAPI", "HeraldOps", "HeraldRuntime", "HeraldDomain", "HeraldSettings", "HeraldStorage",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "herald-worker",
            dependencies: [
                "HeraldDelivery", "HeraldOps", "HeraldRuntime", "HeraldSettings", "HeraldStorage",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "heraldctl",
            dependencies: [
                "HeraldDomain", "HeraldSettings", "HeraldStorage", "HeraldRuntime",
                // `heraldctl hub` reconciles and rebuilds through HeraldDelivery, which holds the hub client.
                "HeraldDelivery",
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                // `heraldctl send` talks to herald-api over HTTP (never to the hub).
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "nh-emulator",
            dependencies: [
                "NotificationHubsEmulator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "herald-bench",
            dependencies: [
                "PostgresQueue", "HeraldDomain", "HeraldStorage", "HeraldRuntime", "NotificationHubs", "NotificationHubsEmulator",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            path: "Benchmarks/herald-bench",
            swiftSettings: swiftSettings
        ),

        // Prints docs/configuration.md from the `Setting` declarations (`make docs`).
        .executableTarget(
            name: "herald-docs",
            dependencies: ["HeraldSettings", "HeraldRuntime", "HeraldStorage", "HeraldAPI", "HeraldDelivery"],
            path: "Tools/herald-docs",
            swiftSettings: swiftSettings
        ),

        // MARK: Tests
        .executableTarget(
            name: "pgqueue-probe",
            dependencies: [
                "PostgresQueue", "HeraldRuntime",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tests/pgqueue-probe",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldTestSupport",
            dependencies: [
                "HeraldStorage", "HeraldRuntime", "PostgresQueue",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/HeraldTestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PostgresQueueTests",
            dependencies: [
                "PostgresQueue", "PostgresQueueTesting", "HeraldTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldEndToEndTests",
            dependencies: [
                // NotificationHubs: to change a hub behind Herald's back (the reconcile tests).
                "HeraldTestSupport", "HeraldStorage", "HeraldDomain", "NotificationHubs",
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldDomainTests",
            dependencies: ["HeraldDomain"],
            // Fixtures/cron: cron fire instants from croniter and a DST oracle (scripts/cron-fixtures).
            resources: [.copy("Fixtures")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldSettingsTests",
            dependencies: [
                "HeraldSettings", "HeraldRuntime", "HeraldStorage", "HeraldAPI", "HeraldDelivery", "herald-docs",
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldStorageTests",
            dependencies: [
                "HeraldStorage", "HeraldTestSupport", "PostgresQueue", "PostgresQueueTesting",
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldAPITests",
            dependencies: [
                "HeraldAPI", "HeraldOps", "HeraldStorage", "HeraldDomain", "HeraldTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldDeliveryTests",
            dependencies: [
                "HeraldDelivery", "HeraldStorage", "HeraldDomain", "PostgresQueue", "PostgresQueueTesting",
                "NotificationHubs", "NotificationHubsEmulator", "HeraldTestSupport", "HeraldRuntime", "HeraldSettings",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldOpsTests",
            dependencies: [
                "HeraldOps", "HeraldStorage", "HeraldDomain", "PostgresQueue", "HeraldTestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldRuntimeTests",
            dependencies: [
                "HeraldRuntime", "HeraldSettings", "HeraldStorage", "HeraldTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "NotificationHubsTests",
            dependencies: [
                "NotificationHubs", "NotificationHubsEmulator",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            resources: [.copy("Fixtures")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "NotificationHubsEmulatorTests",
            dependencies: [
                "NotificationHubsEmulator",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
