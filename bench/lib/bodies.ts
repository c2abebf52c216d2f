// Request bodies the benches send.
export const LAUNCH_INFO = {
  appVersionCode: 42,
  appVersionName: '4.2.0',
  sdkVersion: 7,
  firstTime: false,
  deviceType: 'phone',
  deviceManufacturer: 'samsung',
  deviceModel: 'SM-G991B',
  deviceCarrier: 'Vodafone',
  osName: 'Android',
  osVersion: '14',
  platform: 'ANDROID',
  language: 'en-GB',
};

export const LAUNCH_BODY = JSON.stringify({ timestamp: 1700000000000, info: LAUNCH_INFO });
