// querywrite.ts (querywrite-as.wasm): an AssemblyScript plugin whose
// queries try every write path the SDK has (a view put and delete, an
// index entry's, an effect): each must fail the query with the SDK's
// message, and reach nothing. "echo" answers its input. Its apply writes
// each update's value to the view under the update's key.

import {
  Plugin, Update, Bytes, register, put, del, emit, indexPut, indexDel,
  registerQuery, answer,
} from "../../../abi/sdk/assemblyscript/assembly/index";

export * from "../../../abi/sdk/assemblyscript/assembly/exports";
export * from "../../../abi/sdk/assemblyscript/assembly/queries";

class Rec {
  constructor(public keyPtr: usize, public keyLen: u32, public valuePtr: usize, public valueLen: u32) {}
}

class KeyView extends Plugin<Rec> {
  parse(u: Update): Rec | null {
    return new Rec(u.keyPtr, u.keyLen, u.valuePtr, u.valueLen);
  }

  apply(rs: Array<Rec>): void {
    for (let i = 0; i < rs.length; i++) put(rs[i].keyPtr, rs[i].keyLen, rs[i].valuePtr, rs[i].valueLen);
  }
}

register(new KeyView("testdata-querywrite", "1.0.0", 1));

const K = memory.data<u8>([0x6b]);
registerQuery("echo", "", (in_: Bytes): void => { answer(in_.ptr, in_.len); });
registerQuery("put", "", (in_: Bytes): void => { put(K, 1, in_.ptr, in_.len); answer(K, 1); });
registerQuery("del", "", (in_: Bytes): void => { del(K, 1); answer(K, 1); });
registerQuery("emit", "", (in_: Bytes): void => { emit(K, 1, in_.ptr, in_.len); answer(K, 1); });
registerQuery("index-put", "", (in_: Bytes): void => { indexPut(K, 1, K, 1, K, 1); answer(K, 1); });
registerQuery("index-del", "", (in_: Bytes): void => { indexDel(K, 1, K, 1, K, 1); answer(K, 1); });
