// The query exports (ABI minor 2). A plugin that declares queries
// (registerQuery) re-exports them from its entry file, beside exports.ts:
//
//   export * from "@foldhost/sdk-assemblyscript/assembly/queries";
export { foldhost_queries, foldhost_query } from "./index";
