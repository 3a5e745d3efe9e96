// swift-tools-version: 6.1
import CompilerPluginSupport
import PackageDescription

let package = Package(
    name: "ContextStack",
    // `Synchronization.Atomic` needs these floors on Apple platforms; Linux has it
    // with any Swift 6 toolchain.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "ContextStack", targets: ["ContextStack"]),
        // The PostgreSQL store: `import ContextStackPostgres`, then `stack.addPostgresStore(url:)`.
        // A separate product, so SQLite-only apps neither build nor link libpq.
        .library(name: "ContextStackPostgres", targets: ["ContextStackPostgres"]),
        .executable(name: "demo", targets: ["demo"]),
    ],
    dependencies: [
        // The only dependency: `@Entity` and its companions are macros, and macros need
        // swift-syntax. Nothing else is linked into the library.
        .package(url: "https://github.com/swiftlang/swift-syntax.git", exact: "603.0.1"),
    ],
    targets: [
        // The system SQLite, found through pkg-config. Only `_ContextStackSQLite` imports it.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        // libpq, the reference PostgreSQL client, found through pkg-config. Only
        // `_ContextStackPostgres` imports it; SQLite-only users never build or link it.
        .systemLibrary(
            name: "CLibpq",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        .macro(
            name: "ContextStackMacros",
            dependencies: [
                .product(name: "SwiftSyntax", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacros", package: "swift-syntax"),
                .product(name: "SwiftCompilerPlugin", package: "swift-syntax"),
                .product(name: "SwiftDiagnostics", package: "swift-syntax"),
            ]
        ),
        // The layers below the API, each a target so the compiler keeps them apart (see
        // Docs/Architecture.md). Their names start with an underscore: users import
        // `ContextStack`, which re-exports the public types they need.
        //
        // Values, text matching, locks and SQL quoting that every layer uses.
        .target(name: "_ContextStackCore"),
        // The SQLite layer: connections, statements, errors, registered functions. The only
        // importer of CSQLite.
        .target(name: "_ContextStackSQLite", dependencies: ["CSQLite", "_ContextStackCore"]),
        // The model, the query language, change sets, the store seam (`ObjectStore`) and the
        // object engine behind every context (`ContextCore`). Knows no store and no SQLite.
        .target(name: "_ContextStackModel", dependencies: ["_ContextStackCore"]),
        // The PostgreSQL client layer: connections, prepared statements, values both ways,
        // errors. The only importer of CLibpq; the PostgreSQL store will be built on it.
        .target(name: "_ContextStackPostgres", dependencies: ["CLibpq", "_ContextStackCore"]),
        // The PostgreSQL store: the second implementation of the store seam.
        .target(name: "_ContextStackPostgresStore", dependencies: ["_ContextStackCore", "_ContextStackModel", "_ContextStackPostgres"]),
        // The SQLite store: the first implementation of the store seam.
        .target(name: "_ContextStackSQLiteStore", dependencies: ["_ContextStackCore", "_ContextStackModel", "_ContextStackSQLite"]),
        // The API users import: Stack, MainContext, update contexts, observation, macros.
        .target(
            name: "ContextStack",
            dependencies: ["_ContextStackCore", "_ContextStackSQLite", "_ContextStackModel", "_ContextStackSQLiteStore", "ContextStackMacros"]
        ),
        // `Stack.addPostgresStore`: the product's only public API.
        .target(
            name: "ContextStackPostgres",
            dependencies: ["ContextStack", "_ContextStackCore", "_ContextStackModel", "_ContextStackPostgres", "_ContextStackPostgresStore"]
        ),
        .executableTarget(name: "demo", dependencies: ["ContextStack", "ContextStackPostgres"]),
        // The child process that the crash-safety tests kill with SIGKILL. Not a product: a
        // plain `swift build` or `swift test` builds it next to the test bundle, where the
        // tests look for it.
        .executableTarget(name: "stress-writer", dependencies: ["ContextStack", "ContextStackPostgres"], path: "Tests/StressWriter"),
        // Sets how many tests run at once before Swift Testing starts (Tests/TestRunnerSettings/settings.c).
        .target(name: "TestRunnerSettings", path: "Tests/TestRunnerSettings"),
        .testTarget(
            name: "ContextStackTests",
            dependencies: ["ContextStack", "_ContextStackCore", "_ContextStackSQLite", "_ContextStackModel", "_ContextStackSQLiteStore",
                           "_ContextStackPostgres", "_ContextStackPostgresStore", "ContextStackPostgres", "TestRunnerSettings"]
        ),
        .testTarget(
            name: "ContextStackMacrosTests",
            dependencies: [
                "ContextStackMacros",
                .product(name: "SwiftSyntaxMacroExpansion", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacrosGenericTestSupport", package: "swift-syntax"),
            ]
        ),
    ]
)

// One place for the settings every target shares.
for target in package.targets where target.type != .system && target.name != "TestRunnerSettings" {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    target.swiftSettings = settings
}
package.swiftLanguageModes = [.v6]
