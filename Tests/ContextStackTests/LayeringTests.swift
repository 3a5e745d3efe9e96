import Foundation
import Testing

/// The layers of `Docs/Architecture.md`, as far as the compiler cannot keep them itself.
///
/// The target graph already rejects an upward import between targets (the core cannot import
/// the SQLite layer: that is a circular dependency). What it cannot reject is an import of
/// `CSQLite` from a target above the SQLite layer, because SwiftPM makes a system library's
/// module visible to every target that depends on it, however indirectly. This test reads the
/// sources and fails for that.
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
