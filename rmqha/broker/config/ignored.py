"""The RocketMQ 4.9.8 settings this broker accepts and does not use, with 4.9.8's defaults.

GET_BROKER_CONFIG answers every key 4.9.8's getBrokerConfig prints (BrokerConfig, MessageStoreConfig,
NettyServerConfig and NettyClientConfig, null ones left out: 177 with namesrvAddr set), so 4.9.8's
`mqadmin getBrokerConfig` and `exportConfigs` (which reads fileReservedTime, filterServerNums,
slaveReadEnable, traceOn, useTLS ... and throws a NullPointerException on a key that is missing) work
against this broker. The keys below are shown with 4.9.8's default, or with the value the config file
gave them; this broker does nothing with them: a config file may set them (named in one WARNING at
start), UPDATE_BROKER_CONFIG refuses them ("a RocketMQ 4.9 setting this broker does not use"), so no
change pretends to be honoured. docs/operations.md lists them.
"""

from __future__ import annotations

import os


def _cpus() -> int:
    return os.cpu_count() or 1  # Runtime.availableProcessors()


def _send_threads() -> int:
    return min(_cpus(), 4)


# 4.9.8's defaults that depend on the machine (its thread pools): computed as 4.9.8 computes them.
MACHINE_DEFAULTS = {
    "sendMessageThreadPoolNums": _send_threads,
    "putMessageFutureThreadPoolNums": lambda: min(_cpus(), 4),
    "pullMessageThreadPoolNums": lambda: 16 + _cpus() * 2,
    "processReplyMessageThreadPoolNums": lambda: 16 + _cpus() * 2,
    "queryMessageThreadPoolNums": lambda: 8 + _cpus(),
    "heartbeatThreadPoolNums": lambda: min(32, _cpus()),
    "endTransactionThreadPoolNums": lambda: max(8 + _cpus() * 2, _send_threads() * 4),
    "clientCallbackExecutorThreads": _cpus,
}

# key -> 4.9.8's default, as its getBrokerConfig prints it
DEFAULTS = {
    "accessMessageInMemoryMaxRatio": "40",
    "adminBrokerThreadPoolNums": "16",
    "autoDeleteUnusedStats": "false",
    "bitMapLengthConsumeQueueExt": "112",
    "brokerFastFailureEnable": "true",
    "brokerTopicEnable": "true",
    "channelNotActiveInterval": "60000",
    "clientAsyncSemaphoreValue": "65535",
    "clientChannelMaxIdleTimeSeconds": "120",
    "clientCloseSocketIfTimeout": "true",
    "clientManageThreadPoolNums": "32",
    "clientManagerThreadPoolQueueCapacity": "1000000",
    "clientOnewaySemaphoreValue": "65535",
    "clientPooledByteBufAllocatorEnable": "false",
    "clientSocketRcvBufSize": "0",
    "clientSocketSndBufSize": "0",
    "clientWorkerThreads": "4",
    "clusterTopicEnable": "true",
    "commercialBaseCount": "1",
    "commercialBigCount": "1",
    "commercialEnable": "true",
    "commercialTimerCount": "1",
    "commercialTransCount": "1",
    "commitCommitLogLeastPages": "4",
    "commitCommitLogThoroughInterval": "200",
    "commitIntervalCommitLog": "200",
    "compressedRegister": "false",
    "configBlackList": "configBlackList;brokerConfigPath",
    "connectTimeoutMillis": "3000",
    "consumerFallbehindThreshold": "17179869184",
    "consumerManageThreadPoolNums": "32",
    "consumerManagerThreadPoolQueueCapacity": "1000000",
    "debugLockEnable": "false",
    "defaultQueryMaxNum": "32",
    "disableConsumeIfConsumerReadSlowly": "false",
    "diskFallRecorded": "true",
    "duplicationEnable": "false",
    "enableCalcFilterBitMap": "false",
    "enableConsumeQueueExt": "false",
    "enableDetailStat": "true",
    "enableLmq": "false",
    "enableMultiDispatch": "false",
    "enablePropertyFilter": "false",
    "enableScheduleAsyncDeliver": "false",
    "enableScheduleMessageStats": "true",
    "endTransactionPoolQueueCapacity": "100000",
    "expectConsumerNumUseFilter": "32",
    "fastFailIfNoBufferInStorePool": "false",
    "fetchNamesrvAddrByAddressServer": "false",
    "filterDataCleanTimeSpan": "86400000",
    "filterServerNums": "0",
    "filterSupportRetry": "false",
    "flushCommitLogLeastPages": "4",
    "flushCommitLogThoroughInterval": "10000",
    "flushCommitLogTimed": "true",
    "flushConsumeQueueLeastPages": "2",
    "flushConsumeQueueThoroughInterval": "60000",
    "flushConsumerOffsetHistoryInterval": "60000",
    "flushConsumerOffsetInterval": "5000",
    "flushIntervalConsumeQueue": "1000",
    "flushLeastPagesWhenWarmMapedFile": "4096",
    "forceRegister": "true",
    "heartbeatThreadPoolQueueCapacity": "50000",
    "highSpeedMode": "false",
    "isEnableBatchPush": "false",
    "isolateLogEnable": "false",
    "longPollingEnable": "true",
    "mappedFileSizeConsumeQueueExt": "50331648",
    "maxDelayTime": "40",
    "maxErrorRateOfBloomFilter": "20",
    "maxLmqConsumeQueueNum": "20000",
    "maxMsgsNumBatch": "64",
    "maxTransferBytesOnMessageInDisk": "65536",
    "maxTransferBytesOnMessageInMemory": "262144",
    "maxTransferCountOnMessageInDisk": "8",
    "maxTransferCountOnMessageInMemory": "32",
    "messageIndexSafe": "false",
    "messageStorePlugIn": "",
    "offsetCheckInSlave": "false",
    "osPageCacheBusyTimeOutMills": "1000",
    "pullThreadPoolQueueCapacity": "100000",
    "putMsgIndexHightWater": "600000",
    "putThreadPoolQueueCapacity": "10000",
    "queryThreadPoolQueueCapacity": "20000",
    "regionId": "DefaultRegion",
    "registerBrokerTimeoutMills": "6000",
    "replyThreadPoolQueueCapacity": "10000",
    "scheduleAsyncDeliverMaxPendingLimit": "2000",
    "scheduleAsyncDeliverMaxResendNum2Blocked": "3",
    "sendThreadPoolQueueCapacity": "10000",
    "serverAsyncSemaphoreValue": "64",
    "serverCallbackExecutorThreads": "0",
    "serverOnewaySemaphoreValue": "256",
    "serverPooledByteBufAllocatorEnable": "true",
    "serverSelectorThreads": "3",
    "serverSocketBacklog": "1024",
    "serverSocketRcvBufSize": "0",
    "serverSocketSndBufSize": "0",
    "serverWorkerThreads": "8",
    "shortPollingTimeMills": "1000",
    "slaveReadEnable": "false",
    "startAcceptSendRequestTimeStamp": "0",
    "storeReplyMessageEnable": "true",
    "traceOn": "true",
    "transferMsgByHeap": "true",
    "transientStorePoolEnable": "false",
    "transientStorePoolSize": "5",
    "useEpollNativeSelector": "false",
    "useReentrantLockWhenPutMessage": "true",
    "useTLS": "false",
    "waitTimeMillsInHeartbeatQueue": "31000",
    "waitTimeMillsInPullQueue": "5000",
    "waitTimeMillsInSendQueue": "200",
    "waitTimeMillsInTransactionQueue": "3000",
    "warmMapedFileEnable": "false",
    "writeBufferHighWaterMark": "0",
    "writeBufferLowWaterMark": "0",
}

# 4.9 keys a config file may carry that 4.9.8's getBrokerConfig does not print (null by default, or
# not settings of the broker at all)
OTHER_KEYS = frozenset({"storePathIndex", "storeCheckpoint", "abortFile"})

IGNORED_KEYS = frozenset(DEFAULTS) | frozenset(MACHINE_DEFAULTS) | OTHER_KEYS


def default_text(key: str) -> str | None:
    """4.9.8's default of an ignored key, as text; None for one it leaves out."""
    if key in MACHINE_DEFAULTS:
        return str(MACHINE_DEFAULTS[key]())
    return DEFAULTS.get(key)
