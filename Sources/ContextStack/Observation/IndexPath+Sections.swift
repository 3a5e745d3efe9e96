import Foundation

// UIKit (and AppKit) give `IndexPath` its `item` and `section`; where neither exists — Linux,
// Windows — ContextStack adds the same members, so code that reads `FetchedResults` compiles
// unchanged on every platform.
#if !canImport(UIKit) && !canImport(AppKit)
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

extension IndexPath {
    /// An index path to `item` in `section`, as UIKit makes it.
    ///
    /// For example: `results.object(at: IndexPath(item: 0, section: 1))`.
    public init(item: Int, section: Int) {
        self.init(indexes: [section, item])
    }

    /// The section: the first index.
    public var section: Int {
        get { self[0] }
        set { self[0] = newValue }
    }

    /// The item within the section: the second index.
    public var item: Int {
        get { self[1] }
        set { self[1] = newValue }
    }
}
#endif

extension IndexPath {
    /// `[section, item]`, without the UI frameworks' initializer (which the library cannot
    /// rely on where UIKit or AppKit is present but not imported).
    static func at(_ section: Int, _ item: Int) -> IndexPath { IndexPath(indexes: [section, item]) }
}
