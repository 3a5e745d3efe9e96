// swift-tools-version: 6.1
import PackageDescription

// The benchmark is its own package so that the library itself gains no dependency: GRDB and
// the direct SQLite and libpq calls live here only.
//
//     swift run -c release --package-path Benchmarks bench [--n 100000] [--json out.json]
//     swift run -c release --package-path Benchmarks bench --postgres postgres://user@host/db
let package = Package(
    name: "Benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        // The library under test, from this checkout.
        .package(name: "ContextStack", path: ".."),
        // The peer a Linux user would otherwise pick: records over a database pool.
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        // The peer a Vapor user would pick on PostgreSQL: Fluent, as a Vapor app uses it.
        .package(url: "https://github.com/vapor/fluent-kit.git", exact: "1.57.0"),
        .package(url: "https://github.com/vapor/fluent-postgres-driver.git", exact: "2.14.0"),
    ],
    targets: [
        // The system SQLite, called directly for the "raw" contender (the root package's
        // CSQLite is not a product, so this is a module map of its own).
        .systemLibrary(
            name: "BenchSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        // libpq, called directly for the raw PostgreSQL contender (`--postgres URL`).
        .systemLibrary(
            name: "BenchPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        .executableTarget(
            name: "bench",
            dependencies: [
                "BenchSQLite",
                "BenchPQ",
                .product(name: "ContextStack", package: "ContextStack"),
                .product(name: "ContextStackPostgres", package: "ContextStack"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "FluentKit", package: "fluent-kit"),
                .product(name: "FluentPostgresDriver", package: "fluent-postgres-driver"),
            ]
        ),
    ]
)

for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    target.swiftSettings = settings
}
package.swiftLanguageModes = [.v6]
