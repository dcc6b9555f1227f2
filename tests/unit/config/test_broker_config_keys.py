"""GET_BROKER_CONFIG (26) answers every key 4.9.8's getBrokerConfig prints, so 4.9.8's `mqadmin getBrokerConfig`
and `exportConfigs` work against this broker (exportConfigs threw a NullPointerException on a missing key);
the 4.9 keys this broker does not use show 4.9.8's defaults (rmqha/broker/config/ignored.py) and are refused
by UPDATE_BROKER_CONFIG, so no update pretends to be honoured."""

import pytest

from rmqha.broker.config import ignored as config_ignored
from rmqha.broker.config import policy as config_policy
from rmqha.broker.config.properties import BrokerConfig, parse_properties

# The keys a 4.9.8 broker's GET_BROKER_CONFIG body held (a default broker.properties with namesrvAddr set,
# so storePathCommitLog, null by default, is not among them): 177.
KEYS_4_9_8 = """
    accessMessageInMemoryMaxRatio aclEnable adminBrokerThreadPoolNums autoCreateSubscriptionGroup
    autoCreateTopicEnable autoDeleteUnusedStats bitMapLengthConsumeQueueExt brokerClusterName
    brokerFastFailureEnable brokerIP1 brokerIP2 brokerId brokerName brokerPermission brokerRole
    brokerTopicEnable channelNotActiveInterval checkCRCOnRecover cleanFileForciblyEnable cleanResourceInterval
    clientAsyncSemaphoreValue clientCallbackExecutorThreads clientChannelMaxIdleTimeSeconds
    clientCloseSocketIfTimeout clientManageThreadPoolNums clientManagerThreadPoolQueueCapacity
    clientOnewaySemaphoreValue clientPooledByteBufAllocatorEnable clientSocketRcvBufSize clientSocketSndBufSize
    clientWorkerThreads clusterTopicEnable commercialBaseCount commercialBigCount commercialEnable
    commercialTimerCount commercialTransCount commitCommitLogLeastPages commitCommitLogThoroughInterval
    commitIntervalCommitLog compressedRegister configBlackList connectTimeoutMillis consumerFallbehindThreshold
    consumerManageThreadPoolNums consumerManagerThreadPoolQueueCapacity debugLockEnable defaultQueryMaxNum
    defaultTopicQueueNums deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval deleteWhen
    destroyMapedFileIntervalForcibly disableConsumeIfConsumerReadSlowly diskFallRecorded diskMaxUsedSpaceRatio
    duplicationEnable enableCalcFilterBitMap enableConsumeQueueExt enableDLegerCommitLog enableDetailStat
    enableLmq enableMultiDispatch enablePropertyFilter enableScheduleAsyncDeliver enableScheduleMessageStats
    endTransactionPoolQueueCapacity endTransactionThreadPoolNums expectConsumerNumUseFilter
    fastFailIfNoBufferInStorePool fetchNamesrvAddrByAddressServer fileReservedTime filterDataCleanTimeSpan
    filterServerNums filterSupportRetry flushCommitLogLeastPages flushCommitLogThoroughInterval
    flushCommitLogTimed flushConsumeQueueLeastPages flushConsumeQueueThoroughInterval
    flushConsumerOffsetHistoryInterval flushConsumerOffsetInterval flushDelayOffsetInterval flushDiskType
    flushIntervalCommitLog flushIntervalConsumeQueue flushLeastPagesWhenWarmMapedFile forceRegister
    haHousekeepingInterval haListenPort haSendHeartbeatInterval haSlaveFallbehindMax haTransferBatchSize
    heartbeatThreadPoolNums heartbeatThreadPoolQueueCapacity highSpeedMode isEnableBatchPush isolateLogEnable
    listenPort longPollingEnable mappedFileSizeCommitLog mappedFileSizeConsumeQueue
    mappedFileSizeConsumeQueueExt maxDelayTime maxErrorRateOfBloomFilter maxHashSlotNum maxIndexNum
    maxLmqConsumeQueueNum maxMessageSize maxMsgsNumBatch maxTransferBytesOnMessageInDisk
    maxTransferBytesOnMessageInMemory maxTransferCountOnMessageInDisk maxTransferCountOnMessageInMemory
    messageDelayLevel messageIndexEnable messageIndexSafe messageStorePlugIn msgTraceTopicName namesrvAddr
    notifyConsumerIdsChangedEnable offsetCheckInSlave osPageCacheBusyTimeOutMills
    processReplyMessageThreadPoolNums pullMessageThreadPoolNums pullThreadPoolQueueCapacity
    putMessageFutureThreadPoolNums putMsgIndexHightWater putThreadPoolQueueCapacity queryMessageThreadPoolNums
    queryThreadPoolQueueCapacity redeleteHangedFileInterval regionId registerBrokerTimeoutMills
    registerNameServerPeriod rejectTransactionMessage replyThreadPoolQueueCapacity rocketmqHome
    scheduleAsyncDeliverMaxPendingLimit scheduleAsyncDeliverMaxResendNum2Blocked sendMessageThreadPoolNums
    sendThreadPoolQueueCapacity serverAsyncSemaphoreValue serverCallbackExecutorThreads
    serverChannelMaxIdleTimeSeconds serverOnewaySemaphoreValue serverPooledByteBufAllocatorEnable
    serverSelectorThreads serverSocketBacklog serverSocketRcvBufSize serverSocketSndBufSize serverWorkerThreads
    shortPollingTimeMills slaveReadEnable slaveTimeout startAcceptSendRequestTimeStamp storePathRootDir
    storeReplyMessageEnable syncFlushTimeout traceOn traceTopicEnable transactionCheckInterval
    transactionCheckMax transactionTimeOut transferMsgByHeap transientStorePoolEnable transientStorePoolSize
    useEpollNativeSelector useReentrantLockWhenPutMessage useTLS waitTimeMillsInHeartbeatQueue
    waitTimeMillsInPullQueue waitTimeMillsInSendQueue waitTimeMillsInTransactionQueue warmMapedFileEnable
    writeBufferHighWaterMark writeBufferLowWaterMark
""".split()

# What 4.9.8's ExportConfigsCommand.needBrokerProprties reads: a missing one is its NullPointerException.
EXPORT_CONFIGS_KEYS = (
    "brokerClusterName brokerId brokerName brokerRole fileReservedTime filterServerNums flushDiskType "
    "maxMessageSize messageDelayLevel msgTraceTopicName slaveReadEnable traceOn traceTopicEnable useTLS "
    "autoCreateTopicEnable autoCreateSubscriptionGroup"
).split()


def settings(**props):
    return parse_properties(
        config_policy.properties_text(BrokerConfig.from_properties({"namesrvAddr": "127.0.0.1:9876", **props}))
    )


def test_every_key_4_9_8_prints_is_there():
    assert len(KEYS_4_9_8) == 177
    got = settings(brokerName="broker-a")
    assert not set(KEYS_4_9_8) - set(got), sorted(set(KEYS_4_9_8) - set(got))
    assert all(got[k] is not None for k in EXPORT_CONFIGS_KEYS)


def test_ignored_keys_show_4_9_8_s_defaults_or_the_file_s_value():
    got = settings(brokerName="broker-a")
    assert (got["useTLS"], got["traceOn"], got["filterServerNums"], got["slaveReadEnable"]) == (
        "false",
        "true",
        "0",
        "false",
    )
    assert got["configBlackList"] == "configBlackList;brokerConfigPath"
    assert settings(brokerName="broker-a", useTLS="true")["useTLS"] == "true"  # what the file said
    # derived as 4.9 derives them
    got = settings(brokerName="broker-a", listenPort="20911", brokerIP1="10.0.0.7")
    assert (got["haListenPort"], got["brokerIP2"]) == ("20912", "10.0.0.7")
    assert "storePathCommitLog" not in got and "dLegerGroup" not in got  # null in 4.9 unless set


@pytest.mark.parametrize("key", ["useTLS", "slaveReadEnable", "sendMessageThreadPoolNums", "traceOn"])
def test_an_update_of_an_ignored_key_is_refused_not_pretended(key):
    with pytest.raises(config_policy.UpdateRefused, match="a RocketMQ 4.9 setting this broker does not use"):
        config_policy.plan_update(BrokerConfig.from_properties({"brokerName": "a"}), {key: "1"})
    assert key in config_ignored.IGNORED_KEYS


def test_the_retention_keys_are_this_broker_s_own_and_change_at_run_time():
    c = BrokerConfig.from_properties({"brokerName": "a"})
    plan = config_policy.plan_update(
        c, {"fileReservedTime": "48", "deleteWhen": "03;15", "diskMaxUsedSpaceRatio": "80"}
    )
    assert plan.live == ["deleteWhen", "diskMaxUsedSpaceRatio", "fileReservedTime"] and not plan.restart
    with pytest.raises(config_policy.UpdateRefused, match="deleteWhen"):
        config_policy.plan_update(c, {"deleteWhen": "4am"})
