// The message of a config the loader refuses (TB_ERR_CONFIG_INVALID), for the config tests that check
// what an operator reads; any other outcome fails the test that asked.
import { isGatewayError } from '../../src/errors.js';

export function refusalOf(parse: (text: string) => unknown, text: string): string {
  try {
    parse(text);
  } catch (error) {
    if (isGatewayError(error) && error.code === 'TB_ERR_CONFIG_INVALID') return error.message;
    throw error;
  }
  throw new Error('the config was accepted but should have been refused');
}
