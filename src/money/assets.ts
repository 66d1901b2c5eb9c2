// The tokens @x402/evm knows (its DEFAULT_ASSETS table): for a network and asset address, the
// token's EIP-712 domain {name, version}, its decimals and how it is transferred. The config uses
// it to fill `payments.x402.extra` and to refuse an asset it cannot describe (SPEC §19).
//
// Why a lazy CommonJS require: the table ships in @x402/evm's root entry, which loads viem (~250 ms
// here). Config loading is synchronous (zod) and runs in every `tollbooth check` and every test
// that builds a config; only a config with x402 switched on needs the table, so only that pays.
import { createRequire } from 'node:module';

export interface KnownAsset {
  /** The token's EIP-712 domain name, e.g. "USD Coin". */
  name: string;
  /** The token's EIP-712 domain version, e.g. "2". */
  version: string;
  decimals: number;
  /** "eip3009" (transferWithAuthorization) unless the table says otherwise (e.g. "permit2"). */
  transferMethod: string;
}

type EvmModule = typeof import('@x402/evm');

let evm: EvmModule | undefined;
const requireEvm = (): EvmModule => (evm ??= createRequire(import.meta.url)('@x402/evm') as EvmModule);

/** The library's entry for this asset on this CAIP-2 network (address compared case-insensitively), or undefined. */
export function knownAsset(network: string, asset: string): KnownAsset | undefined {
  let entry: ReturnType<EvmModule['findDefaultAsset']>;
  try {
    entry = requireEvm().findDefaultAsset(asset, network as `${string}:${string}`);
  } catch {
    return undefined; // a network the library does not know
  }
  if (!entry) return undefined;
  return { name: entry.name, version: entry.version, decimals: entry.decimals, transferMethod: entry.assetTransferMethod ?? 'eip3009' };
}
