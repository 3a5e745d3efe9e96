import Foundation
import Testing

/// The layers of `Docs/Architecture.md`, as far as the compiler cannot keep them itself.
///
/// The target graph rejects an upward dependency (the model cannot depend on the SQLite store:
/// that is a cycle). Two holes remain, and this suite reads the sources to close them:
/// SwiftPM makes a system library's module (`CSQLite`) visible to every target above it,
/// however indirectly; and all modules land in one build directory, so an incremental build
/// can let a target import a sibling it never declared (only
/// `--explicit-target-dependency-import-check error` would catch that, and `swift test` does
/// not pass it).
@Suite struct LayeringTests {
    /// `<package>/Sources`, found from this file's path.
    static var sources: URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.appendingPathComponent("Sources")
    }

    /// Every Swift file under `Sources/`, with its target's name.
    static func swiftFiles() throws -> [(target: String, url: URL)] {
        let manager = FileManager.default
        var files: [(String, URL)] = []
        for target in try manager.contentsOfDirectory(atPath: sources.path).sorted() {
            let root = sources.appendingPathComponent(target)
            guard let walker = manager.enumerator(at: root, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walker where url.pathExtension == "swift" { files.append((target, url)) }
        }
        return files
    }

    /// Which of the package's own modules each target may import: its declared dependencies in
    /// `Package.swift`, written out again so that widening one is a deliberate change here too.
    static let allowedImports: [String: Set<String>] = [
        "_ContextStackCore": [],
        "_ContextStackSQLite": ["CSQLite", "_ContextStackCore"],
        "_ContextStackModel": ["_ContextStackCore"],
        "_ContextStackPostgres": ["CLibpq", "_ContextStackCore"],
        "_ContextStackPostgresStore": ["_ContextStackCore", "_ContextStackModel", "_ContextStackPostgres"],
        "_ContextStackSQLiteStore": ["_ContextStackCore", "_ContextStackModel", "_ContextStackSQLite"],
        "ContextStack": ["_ContextStackCore", "_ContextStackModel", "_ContextStackSQLite", "_ContextStackSQLiteStore"],
        "ContextStackPostgres": ["ContextStack", "_ContextStackCore", "_ContextStackModel", "_ContextStackPostgres", "_ContextStackPostgresStore"],
        "ContextStackMacros": [],
        "demo": ["ContextStack", "ContextStackPostgres"],
    ]

    /// The modules a file imports, however the import is decorated (`@_exported`, `@testable`,
    /// `package`, `public`).
    static func imports(of text: String) -> [String] {
        text.split(separator: "\n").compactMap { line in
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard let index = words.firstIndex(of: "import"), index + 1 < words.count,
                  words[..<index].allSatisfy({ $0.hasPrefix("@") || $0 == "package" || $0 == "public" || $0 == "internal" })
            else { return nil }
            let kinds: Set<Substring> = ["struct", "class", "enum", "protocol", "typealias", "func", "var", "let"]
            let name = kinds.contains(words[index + 1]) && index + 2 < words.count ? words[index + 2] : words[index + 1]
            return String(name.split(separator: ".")[0])
        }
    }

    @Test func everyTargetImportsOnlyTheLayersBelowIt() throws {
        let files = try Self.swiftFiles()
        let ours = Set(Self.allowedImports.keys).union(["CSQLite", "CLibpq"])
        #expect(Set(files.map(\.target)) == Set(Self.allowedImports.keys), "a target was added or renamed: list it in allowedImports")
        for (target, url) in files {
            let allowed = Self.allowedImports[target] ?? []
            for module in Self.imports(of: try String(contentsOf: url, encoding: .utf8)) where ours.contains(module) {
                #expect(allowed.contains(module), "\(target)/\(url.lastPathComponent) imports \(module), which is not below it")
            }
        }
    }

    @Test func importsAreReadHoweverTheyAreDecorated() {
        let text = "@_exported import _ContextStackModel\n@testable import ContextStack\nimport struct Foundation.URL\n// import CSQLite\n  import CSQLite"
        #expect(Self.imports(of: text) == ["_ContextStackModel", "ContextStack", "Foundation", "CSQLite"])
    }

    @Test func onlyTheSQLiteLayerImportsCSQLite() throws {
        let files = try Self.swiftFiles()
        #expect(files.count > 50, "the sources were not found at \(Self.sources.path)")
        for (target, url) in files where target != "_ContextStackSQLite" {
            let text = try String(contentsOf: url, encoding: .utf8)
            let imports = text.split(separator: "\n").filter { $0.trimmingCharacters(in: .whitespaces).hasSuffix("import CSQLite") }
            #expect(imports.isEmpty, "\(target)/\(url.lastPathComponent) imports CSQLite: only _ContextStackSQLite may")
        }
    }
}
