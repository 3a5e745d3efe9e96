// swift-tools-version: 6.1
import PackageDescription

// An example JSON API server on ContextStack and Hummingbird 2: people and pets, paging and
// filters, conflict detection answered with HTTP 409, and a live stream of every commit —
// this process's and other processes' — as server-sent events. See README.md.
//
//     swift run --package-path Examples/PeopleServer PeopleServer --port 8080 [--store people.sqlite | postgres://…]
let package = Package(
    name: "PeopleServer",
    platforms: [.macOS(.v15)],
    dependencies: [
        // The library, from this checkout.
        .package(name: "ContextStack", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        // Hummingbird's own dependency: its graceful shutdown ends the live streams.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.0.0"),
    ],
    targets: [
        .executableTarget(
            name: "PeopleServer",
            dependencies: [
                .product(name: "ContextStack", package: "ContextStack"),
                .product(name: "ContextStackPostgres", package: "ContextStack"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
