// Types of the parts of eth-url-parser (an EIP-681 reader, untyped) the tests use.
declare module 'eth-url-parser' {
  export function parse(uri: string): {
    scheme: string;
    prefix?: string;
    target_address: string;
    chain_id?: string;
    function_name?: string;
    parameters?: Record<string, string>;
  };
}
